"""Tests of smg/pipeline/."""
