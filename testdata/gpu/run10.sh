#!/bin/bash
# Tenth GPU run: run5.sh's steps (CUDA tests, the six traces x 20 repetitions, --verify --touch)
# with the pool.json of analyze at the end of 2026-12-03's session (the KV-cache trace's paged
# arena; the other five as in run8). Needs bin/replay-cuda, bin/replay-cuda.test, bin/gpu10/.
RUN=r10 EXPANDABLE=0 CONF=bin/gpu10 exec bash "$(dirname "$0")/run5.sh"
