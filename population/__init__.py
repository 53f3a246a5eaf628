"""Population training of whole algorithm-file runs on `torch.distributed` (tournament and
generational), an application built on the library: `python -m population --algo algos/ppo_vec.py
... -- <the algorithm's flags>`. Everything is in `population/population.py`."""
