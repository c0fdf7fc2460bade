"""The judge: a Claude judge (`JudgeWorkflow`), asking a task's judge, a command task's rounds."""
