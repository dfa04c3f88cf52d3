#!/usr/bin/env bash
# Make sure the system tools delegate needs are installed: `demo` (what running it needs: tmux,
# bubblewrap for sandboxed jobs,
# and Java for the Spark report) or `test` (that, plus what the test suite drives).
# As root on Debian/Ubuntu this installs what is missing with apt-get; otherwise it stops with
# one message naming the packages to install.
set -euo pipefail
purpose=${1:-test}

missing=()
command -v tmux >/dev/null 2>&1 || missing+=(tmux)
java_ok=false
if command -v java >/dev/null 2>&1; then
    major=$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n1)
    [ -n "$major" ] && [ "$major" -ge 17 ] && java_ok=true
fi
$java_ok || missing+=(openjdk-17-jre-headless)
# bubblewrap: a job's sandbox (`sandbox = true`); its absence refuses such a job, nothing else
command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)

if [ "$purpose" = test ]; then
    command -v mosquitto >/dev/null 2>&1 || [ -x /usr/sbin/mosquitto ] || missing+=(mosquitto)
    command -v mosquitto_pub >/dev/null 2>&1 || missing+=(mosquitto-clients)
    # headless Chromium renders the HTML report in the tests
    command -v chromium >/dev/null 2>&1 || missing+=(chromium)
    # cron: `delegate cron` edits crontabs through `crontab`, and a test runs the real daemon
    command -v crontab >/dev/null 2>&1 || missing+=(cron)
    # the shellcheck tool: `make lint` checks the shell/ wrappers
    command -v shellcheck >/dev/null 2>&1 || missing+=(shellcheck)
    # iproute2: the agent-host tests build network namespaces joined by a bridge (`ip netns`)
    command -v ip >/dev/null 2>&1 || missing+=(iproute2)
    # npm installs the real agent CLIs (claude, codex) into .cache/agents for the tests
    command -v npm >/dev/null 2>&1 || missing+=(nodejs npm)
fi

[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing system packages: ${missing[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    exit 0
fi
echo "delegate needs these system packages: ${missing[*]} (install them, e.g. sudo apt-get install ${missing[*]})" >&2
exit 1
