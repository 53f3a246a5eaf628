#!/usr/bin/env bash
# Reproduces the benchmark tables and curves.   Usage: bash benchmark.sh [GROUP]   (default: quick)
#   bash benchmark.sh --help          every group and what it measures (bench/run.py's list)
#   bash benchmark.sh report GROUP    a group's tables and figures from its saved results, no training
#   bash benchmark.sh GROUP --list    the commands a group runs, nothing run
# A learning group is rows of bench/experiments.py: it trains what is missing, resumes what was stopped
# part-way, then writes its report (bench/report.py: IQM over seeds with bootstrap intervals) to
# bench/results/GROUP/; the other groups run their scripts, each writing its own table there.
# Interpreter: $PYTHON if set, else the project's .venv/bin/python (README's set-up), else python on PATH.
set -euo pipefail
cd "$(dirname "$0")"
if [ -n "${PYTHON:-}" ]; then PY=$PYTHON; elif [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python; fi
case "${1:-quick}" in
  -h|--help|help) sed -n '2,/^# Interpreter/p' "$0" | sed 's/^# \{0,1\}//'; echo; exec $PY bench/run.py --help | sed -n '/^learning groups/,$p' ;;
esac
$PY -c "import torch" 2>/dev/null || { echo "benchmark.sh: '$PY' cannot import torch: set the project up first (README: python3 -m venv .venv && .venv/bin/pip install -r requirements.txt) or set PYTHON=/path/to/its/python" >&2; exit 2; }
exec $PY bench/run.py "${@:-quick}" --python "$PY"
