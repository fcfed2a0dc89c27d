"""Tests of smg/pipeline/policies/."""
