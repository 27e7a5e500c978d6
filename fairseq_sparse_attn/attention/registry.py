"""The one registry idiom of the attention core: activations, output norms, bias
providers, head policies (and, with a Capabilities declaration, backends in :mod:`.core`).

    ACTIVATION_REGISTRY = Registry("attention activation")
    register_activation = ACTIVATION_REGISTRY.register      # @register_activation("relu")

A registry is a dict name -> class (or factory); registering a name twice is an error,
the class gets ``registry_name``, and :meth:`Registry.get` names the valid values when a
name is unknown.
"""

from typing import Callable, List, Optional, TypeVar

T = TypeVar("T")


class Registry(dict):
    def __init__(self, what: str, unknown: Optional[str] = None):
        super().__init__()
        self.what = what  # "attention activation": used in error messages
        self.unknown = unknown or what

    def register(self, name: str) -> Callable[[T], T]:
        def wrap(cls):
            if name in self:
                raise ValueError(f"{self.what} {name!r} registered twice")
            self[name] = cls
            try:
                cls.registry_name = name
            except (AttributeError, TypeError):  # e.g. a frozen dataclass instance
                pass
            return cls

        return wrap

    def names(self) -> List[str]:
        return sorted(self)

    def get_or_raise(self, name: str):
        if name not in self:
            raise ValueError(f"unknown {self.unknown} {name!r}; valid values: {', '.join(self.names())}")
        return self[name]
