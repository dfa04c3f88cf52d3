#!/usr/bin/env bash
# An example agent: counts the words of the files it is given and reports as it goes.
# It uses only `delegate publish`, with the job taken from $DELEGATE_JOB_ID, as any agent would.
# The wrapper has already sent `started`; this agent sends its progress and its own `completed`.
set -euo pipefail

total=0
n=0
for file in "$@"; do
    n=$((n + 1))
    words=$(wc -w < "$file")
    total=$((total + words))
    delegate publish --event progress --detail "$(basename "$file"): $words words" \
        --data "{\"file\": $n, \"of\": $#, \"words\": $words}" >/dev/null
done
delegate publish --event completed --detail "$total words in $# file(s)" \
    --data "{\"total_words\": $total}" >/dev/null
