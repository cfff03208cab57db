"""logspool.spark.jar(): compiling the JVM reader from the packaged source, caching it, and the
errors a user gets on a machine that cannot build it. Real javac, real files; no Spark session."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import pytest

pytest.importorskip("pyspark", reason="PySpark is not installed (pip install 'logspool[spark]')")

from logspool.spark import JVM_NAME, JvmError, jar


def test_the_jar_is_built_once_and_registers_the_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOGSPOOL_CACHE_DIR", str(tmp_path / "cache"))
    path = jar()
    assert Path(path).parent == tmp_path / "cache"
    with zipfile.ZipFile(path) as z:
        names = set(z.namelist())
        service = z.read("META-INF/services/org.apache.spark.sql.sources.DataSourceRegister").decode()
    assert "logspool/spark/LogspoolJvmSource.class" in names
    assert "logspool/spark/RangeReader.class" in names and "logspool/spark/Pushdown.class" in names
    assert "logspool/spark/LogspoolSource.class" in names  # format("logspool") where the jar is loaded
    assert service.split() == ["logspool.spark.LogspoolJvmSource", "logspool.spark.LogspoolSource"]
    built = os.stat(path).st_mtime_ns
    assert jar() == path and os.stat(path).st_mtime_ns == built  # cached: not compiled again
    assert os.listdir(tmp_path / "cache") == [os.path.basename(path)]  # no work files left
    assert JVM_NAME == "logspool-jvm"


def test_no_compiler_is_a_clear_error_and_leaves_no_jar(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOGSPOOL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    with pytest.raises(JvmError, match=r"needs a JDK to compile it \(javac"):
        jar()
    assert not list((tmp_path / "cache").glob("*.jar"))


def test_a_compile_error_is_reported_with_javacs_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A javac that fails (here a stand-in script that prints an error) is reported, not hidden."""
    fake = tmp_path / "jdk" / "bin" / "javac"
    fake.parent.mkdir(parents=True)
    fake.write_text("#!/bin/sh\necho 'LogspoolJvmSource.java:1: error: something is wrong' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk"))
    monkeypatch.setenv("LOGSPOOL_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(JvmError, match=r"compiling the JVM reader failed:\n.*error: something is wrong"):
        jar()
    assert not list((tmp_path / "cache").glob("*.jar"))
