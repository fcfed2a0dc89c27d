"""Tests of smg/actors/."""
