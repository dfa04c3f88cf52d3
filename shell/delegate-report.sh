# Source this in an agent's shell to report with short commands:
#   . shell/delegate-report.sh
#   report progress "tests pass"
#   report completed "done: 3 files changed"
# It only wraps `delegate publish`; DELEGATE_JOB_ID must be set (the wrapper sets it).
report() {
    if [ $# -lt 1 ]; then
        echo "usage: report EVENT [DETAIL] [DATA_JSON]" >&2
        return 64
    fi
    if [ -n "${3-}" ]; then
        delegate publish --event "$1" --detail "${2-}" --data "$3"
    else
        delegate publish --event "$1" --detail "${2-}"
    fi
}
