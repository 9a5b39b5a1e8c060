"""Fast providers: ``compiled`` (torch.compile of an op's reference) and ``attention`` (flash,
tiled online-softmax and paged attention engines)."""
