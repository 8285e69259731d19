"""Getting a machine ready: model downloads, the device check, the model manager, load recovery."""
