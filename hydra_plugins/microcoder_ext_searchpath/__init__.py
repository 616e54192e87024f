"""Hydra SearchPathPlugin of microcoder-ext (see :mod:`.microcoder_ext_searchpath`).

``hydra_plugins`` itself is a namespace package shared by every Hydra plugin: it must not get an
``__init__.py``.
"""
