"""The two names transformers' configuration classes take from huggingface_hub.dataclasses.

strict(cls, accept_kwargs=False): runs the class's `validate_*` methods after __init__ and
adds `validate()` that runs them again; with accept_kwargs, __init__ takes unknown keywords
and sets them as attributes (after the dataclass fields). Per-field validators attached by
as_validated_field run when the field is assigned. (huggingface_hub also type-checks each
field against its annotation; that check rejects bad input and never changes a value, so it
is left out: the golden configs are published, valid files.)
"""

from dataclasses import MISSING, field, fields
from functools import wraps


def _class_validators(cls):
    return [getattr(cls, n) for n in dir(cls) if n.startswith("validate_") and callable(getattr(cls, n))]


def strict(cls=None, *, accept_kwargs=False):
    def wrap(cls):
        original_setattr = cls.__setattr__

        def __setattr__(self, name, value):
            f = getattr(type(self), "__dataclass_fields__", {}).get(name)
            if f is not None:
                for v in f.metadata.get("validator", ()):
                    v(value)
            original_setattr(self, name, value)

        cls.__setattr__ = __setattr__

        if accept_kwargs:
            # As transformers' own copy (configuration_utils.wrap_init_to_accept_kwargs):
            # fields from the keywords or their defaults, the other keywords to __post_init__.
            def __init__(self, *args, **kwargs):
                if args:
                    raise ValueError(f"{cls.__name__} accepts only keyword arguments")
                names = {f.name for f in fields(cls)}
                for f in fields(cls):
                    if f.name in kwargs:
                        setattr(self, f.name, kwargs[f.name])
                    elif f.default is not MISSING:
                        setattr(self, f.name, f.default)
                    elif f.default_factory is not MISSING:
                        setattr(self, f.name, f.default_factory())
                    else:
                        raise TypeError(f"Missing required field - '{f.name}'")
                self.__post_init__(**{k: v for k, v in kwargs.items() if k not in names})

            cls.__init__ = __init__

        def validate(self):
            for v in _class_validators(type(self)):
                v(self)

        cls.validate = validate
        init2 = cls.__init__

        @wraps(init2)
        def __init__(self, *args, **kwargs):
            init2(self, *args, **kwargs)
            self.validate()

        cls.__init__ = __init__
        return cls

    return wrap if cls is None else wrap(cls)


def as_validated_field(validator):
    def make(default=MISSING, default_factory=MISSING, init=True, repr=True, hash=None,
             compare=True, metadata=None, **validator_kwargs):
        md = dict(metadata or {})
        check = (lambda value: validator(value, **validator_kwargs)) if validator_kwargs else validator
        md["validator"] = [check]
        return field(default=default, default_factory=default_factory, init=init, repr=repr,
                     hash=hash, compare=compare, metadata=md)

    return make
