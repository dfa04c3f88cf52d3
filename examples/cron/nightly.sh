# The nightly task: runs in the job's tmux session, reports through the wrapper.
date -u +"nightly run at %FT%TZ" >> nightly.log
