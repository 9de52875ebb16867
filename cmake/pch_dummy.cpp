// Empty: the target that owns the precompiled header needs one source.
