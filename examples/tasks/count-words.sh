# A task for the `shell` profile: the prompt is this bash script, run in the job's workdir.
# It hands the real work to the example agent, which reports its own progress and outcome.
exec examples/agents/word-count.sh README.md delegate/core/model.py delegate/core/protocol.py delegate/adapters/registry.py
