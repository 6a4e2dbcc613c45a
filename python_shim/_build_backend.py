"""A minimal in-tree PEP 517 backend, so that `pip install ./python_shim`
needs nothing from the network: the package is pure Python."""
import base64
import hashlib
import os
import zipfile

NAME, VERSION = "gardenalloc", "0.1.0"
_HERE = os.path.dirname(os.path.abspath(__file__))


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def _files():
    pkg = os.path.join(_HERE, NAME)
    for f in sorted(os.listdir(pkg)):
        if f.endswith(".py") or f.endswith(".so"):
            yield os.path.join(pkg, f), "%s/%s" % (NAME, f)


def _wheel(wheel_directory, files):
    dist = "%s-%s.dist-info" % (NAME, VERSION)
    path = os.path.join(wheel_directory, "%s-%s-py3-none-any.whl" % (NAME, VERSION))
    records = []
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        def add(arc, data):
            z.writestr(arc, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            records.append("%s,sha256=%s,%d" % (arc, digest, len(data)))
        for src, arc in files:
            with open(src, "rb") as f:
                add(arc, f.read())
        add(dist + "/METADATA", ("Metadata-Version: 2.1\nName: %s\nVersion: %s\nSummary: gardenalloc, a caching GPU "
                                 "allocator, from Python\n" % (NAME, VERSION)).encode())
        add(dist + "/WHEEL", b"Wheel-Version: 1.0\nGenerator: gardenalloc\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        records.append(dist + "/RECORD,,")
        z.writestr(dist + "/RECORD", "\n".join(records) + "\n")
    return os.path.basename(path)


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _wheel(wheel_directory, list(_files()))


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    pth = os.path.join(wheel_directory, "_gardenalloc_editable.pth")
    with open(pth, "w") as f:
        f.write(_HERE + "\n")
    try:
        return _wheel(wheel_directory, [(pth, "gardenalloc_editable.pth")])
    finally:
        os.remove(pth)
