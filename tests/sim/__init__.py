"""Tests of smg/sim/."""
