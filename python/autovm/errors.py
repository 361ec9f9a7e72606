"""The errors of the AutoVM PyTorch adapter. Every one derives from AutoVMError and says what is
at fault and what to do; none is raised for something the adapter could silently work around
with a result that differs from plain PyTorch."""


class AutoVMError(RuntimeError):
    """Base class of every error of this package."""


class ToolNotFoundError(AutoVMError):
    """autovm-plan or libautovm is not where it was looked for."""


class LibraryError(AutoVMError):
    """A libautovm call failed; the message carries autovm_last_error()."""


class PlannerError(AutoVMError):
    """Exporting the model or running autovm-plan failed (exit code and stderr in the message)."""

    def __init__(self, message, exit_code=None):
        super().__init__(message)
        self.exit_code = exit_code


class ModelMismatchError(AutoVMError):
    """The model is not the one the plan was made for (module paths, parameters, shapes)."""


class BatchMismatchError(ModelMismatchError):
    """The batch size differs from the plan's options.batch."""


class OptimizerMismatchError(AutoVMError):
    """The optimizer object is not of the kind the plan's options.optimizer names."""


class HookOrderError(AutoVMError):
    """A module hook fired in an order the plan does not expect (forward or backward)."""


class PlanFitError(AutoVMError):
    """The plan no longer fits what runs: tensor sizes differ from the plan's, or memory went over
    the limit given to attach()."""
