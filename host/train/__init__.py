"""Training a real model across the simulated sites through wanreduce.

:mod:`.data` splits scikit-learn's digits across the sites by label; :mod:`.aggregate` averages the
sites' tensors through the aggregator (golden model or its bit-identical numpy form); :mod:`.worker` is one
site's PyTorch process (DDP communication hook, ``sync(model)``, DiLoCo, gossip); :mod:`.methods` holds the
methods compared, their WAN costs and the simulated clock; :mod:`.experiment` runs them all and writes
``build/train.json`` and the plot. PyTorch and scikit-learn come with the ``train`` extra; only
:mod:`.worker` and :mod:`.experiment`'s run import torch.
"""
