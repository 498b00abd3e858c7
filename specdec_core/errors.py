"""The errors the engine raises on purpose. Each carries a message meant for a person, not a traceback."""


class SpecDecError(ValueError):
    """Bad input: a prompt, a parameter or a model pair that cannot be run as asked."""


class VocabularyMismatchError(SpecDecError):
    """Draft and target tokenize differently, so the draft's token ids mean nothing to the target."""


class ModelLoadError(SpecDecError):
    """A model could not be loaded: unknown id, no network, remote code required, broken file."""
