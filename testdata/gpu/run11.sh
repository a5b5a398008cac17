#!/bin/bash
# Eleventh GPU run: run9.sh's and run10.sh's steps again after replay's engine learnt to pass
# pool.Remapper through (runs 9 and 10 replayed the paged arena with unmap + map where the
# simulation moved pages): outputs r11 (paged vs one-region arena, page costs) and r11b (the six
# traces with the session's final pool.json).
D="$(dirname "$0")"
RUN=r11 bash "$D/run9.sh"
RUN=r11b EXPANDABLE=0 CONF=bin/gpu10 bash "$D/run5.sh"
