"""The judge: a Claude judge's verdict (`JudgeWorkflow`), asking a task's judge, a command task's rounds."""
