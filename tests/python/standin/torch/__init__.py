"""The recording stand-in (torch_standin.make) as an importable `torch`, for
programs in other processes: put standin/ on PYTHONPATH. GA_STANDIN_CUDA=none
makes it a torch without CUDA; GA_STANDIN_INITIALIZED=1 one whose CUDA is
already initialised."""
import os
import sys

from torch_standin import make

_t = make(version="2.6.0+standin", cuda=None if os.environ.get("GA_STANDIN_CUDA") == "none" else "12.4",
          initialized=os.environ.get("GA_STANDIN_INITIALIZED") == "1")
__version__, version, cuda, calls = _t.__version__, _t.version, _t.cuda, _t.calls
sys.modules["torch.cuda"] = cuda
sys.modules["torch.cuda.memory"] = cuda.memory
