# The nightly task: runs in the job's tmux session, reports through the wrapper. What it
# prints is kept in the job's logs/<job id>/agent.log (nothing is written into the checkout).
date -u +"nightly run at %FT%TZ"
