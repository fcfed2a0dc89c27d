#!/usr/bin/env bash
# Issue 10's bound: the authenticated path's CPU per request against the revision before issue 10
# (7fd1313), HTTP mode, both gateways with --api-key and every request carrying it, plus this
# checkout with no key (`ours_open`). See bench/ab.sh for the knobs.
exec env KEY=1 BASE_REV="${BASE_REV:-7fd1313}" "$(dirname "$0")/ab.sh" http "$@"
