#!/bin/bash
# Seventh GPU run: the CUDA backend's tests, then every trace against the pool.json of the new
# threshold rule (largest threshold within 2% of the least memory; analyze at commit a04c7e9):
# 20 timed repetitions (JSON), and once with --verify --touch; run5.sh's steps without the
# expandable-segments replays. Needs bin/replay-cuda, bin/replay-cuda.test, bin/gpu5/*.pool.json.
RUN=r7 EXPANDABLE=0 exec bash "$(dirname "$0")/run5.sh"
