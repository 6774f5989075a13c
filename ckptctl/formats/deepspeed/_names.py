"""The file names of a DeepSpeed save (see the package docstring): what finding and sniffing a
save need, without the reader."""

from __future__ import annotations

import re

#: A rank's model states: ``mp_rank_00_model_states.pt`` (stages 1/2), one per rank at stage 3.
MODEL_FILE = re.compile(r"(?:zero_pp_rank_(\d+)_)?mp_rank_(\d+)_model_states\.pt")
#: A rank's optimizer states (``bf16_`` under bf16 training).
OPTIM_FILE = re.compile(r"(bf16_)?zero_pp_rank_(\d+)_mp_rank_(\d+)_optim_states\.pt")
