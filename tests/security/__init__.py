"""Attacks on real processes on loopback (issue 10): each finding reproduced, and now refused."""
