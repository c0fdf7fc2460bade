"""What the activities of every model role that works on a task (implementer, judge) read: the
worker's settings and memory, its workspace and the payload store."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from taskfleet.activities.model_io.payload_store import PayloadStore
from taskfleet.activities.services.lessons_index import LessonsIndex
from taskfleet.activities.services.result_cache import ResultCache
from taskfleet.activities.services.template_cache import TemplateCache
from taskfleet.activities.workspace import Workspace
from taskfleet.core.llm_settings import LLMSettings


@dataclass
class ModelRole:
    settings: Any
    llm: LLMSettings
    lessons: LessonsIndex
    templates: TemplateCache
    results: ResultCache
    workspace: Workspace
    store: PayloadStore
