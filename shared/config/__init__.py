"""One validated config for a whole experiment: `ExperimentConfig` and its loader.

Every knob is a pydantic field with a default, a range and a description; a wrong value fails
before any work starts. Sections live in their own modules so each component owns its knobs.
"""

from shared.config.base import Section
from shared.config.experiment import ExperimentConfig
from shared.config.loader import ConfigError, load_config, save_resolved

__all__ = ["ConfigError", "ExperimentConfig", "Section", "load_config", "save_resolved"]
