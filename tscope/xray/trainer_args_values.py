"""Values read from a stranger's training_args.bin (decoded without unpickling) for `tscope xray`:
each either what a Trainer run could have saved, the default when absent, or one line naming the
file. Kept apart from trainer_run.py, which finds the files and runs the audit.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from tscope.errors import UnreadableInput
from tscope.xray.trainer_step import TrainerSettings


def number_setting(decoded: dict[str, Any], key: str, defaults: TrainerSettings) -> float:
    """A finite number the arguments hold, else the default: a crafted training_args.bin with
    label_smoothing_factor "abc" ended `tscope xray` in a ValueError traceback."""
    value = decoded.get(key)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    default: float = getattr(defaults, key)
    return default


def int_setting(decoded: dict[str, Any], key: str, defaults: TrainerSettings) -> int:
    value = decoded.get(key)
    return (
        value if isinstance(value, int) and not isinstance(value, bool) else getattr(defaults, key)
    )


def count_setting(decoded: dict[str, Any], key: str, arguments_file: Path) -> int:
    """A batch size or step count the arguments hold (the default when absent), refused when not
    positive: a crafted per_device_train_batch_size of -4 made an empty probe, reported as
    "lengths: give at least one sequence length." although no --lengths was given."""
    count = int_setting(decoded, key, TrainerSettings())
    if count <= 0:
        raise UnreadableInput(
            str(arguments_file),
            f"{key} = {count}; a Trainer run has at least 1",
            "The file is damaged or crafted; pass --entry FILE.py defining "
            "train_step(model, sequences) instead",
        )
    return count


# The seeds the Trainer's set_seed accepts: numpy's generator takes 0 .. 2**32 - 1.
_MAX_SEED = 2**32 - 1


def seed_setting(decoded: dict[str, Any], arguments_file: Path) -> int:
    seed = int_setting(decoded, "seed", TrainerSettings())
    if not 0 <= seed <= _MAX_SEED:
        raise UnreadableInput(
            str(arguments_file),
            # Not str() of any size: past 4,300 digits it raises ValueError (int_max_str_digits).
            f"seed = {seed if seed.bit_length() <= 64 else f'a {seed.bit_length()}-bit integer'}"
            ", outside the 0 .. 2**32 - 1 a Trainer run can seed with",
            "The file is damaged or crafted; pass --entry FILE.py defining "
            "train_step(model, sequences) instead",
        )
    return seed
