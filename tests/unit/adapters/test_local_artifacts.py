"""adapters/local.LocalArtifactStore: run-local's bucket as GCS would behave, the objects'
content type and metadata kept beside them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from worker_chart_export.adapters.local import LocalArtifactStore
from worker_chart_export.core.exceptions import ArtifactReadError, BucketUnusable
from worker_chart_export.core.types import ListedObject

PNG = b"\x89PNG\r\n\x1a\nrest"
PATH = "charts/run1/charts/20261123T115959000Z_BINANCE-BTCUSDT_1h_price_v1.png"


def test_a_png_is_listed_with_its_content_type_and_metadata_and_nothing_else_is(tmp_path: Path) -> None:
    store = LocalArtifactStore(tmp_path, "bkt")
    uri = store.create_png(PATH, PNG, metadata={"requestDigest": "d" * 64, "claimToken": "t1"})
    store.put_manifest("charts/run1/charts/manifest.json", b"{}")
    assert uri == f"gs://bkt/{PATH}"
    assert store.list_objects("charts/run1/charts/") == [
        ListedObject(PATH, "image/png", {"requestDigest": "d" * 64, "claimToken": "t1"}),
        ListedObject("charts/run1/charts/manifest.json"),  # no metadata kept for it
    ]
    assert sorted(p.name for p in (tmp_path / "bkt" / "charts" / "run1" / "charts").iterdir()) == [
        f".{PATH.rsplit('/', 1)[1]}.meta.json",
        PATH.rsplit("/", 1)[1],
        "manifest.json",
    ]


def test_create_only_keeps_the_first_objects_bytes_and_metadata(tmp_path: Path) -> None:
    store = LocalArtifactStore(tmp_path, "bkt")
    store.create_png(PATH, PNG, metadata={"requestDigest": "first", "claimToken": "t1"})
    store.create_png(PATH, b"other", metadata={"requestDigest": "second", "claimToken": "t2"})
    assert store.read_head(PATH, 100) == PNG
    assert store.list_objects("charts/")[0].metadata == {"requestDigest": "first", "claimToken": "t1"}


def test_metadata_beside_a_file_that_is_not_a_mapping_counts_as_none(tmp_path: Path) -> None:
    store = LocalArtifactStore(tmp_path, "bkt")
    store.create_png(PATH, PNG, metadata={"requestDigest": "d"})
    meta = store.local_path(PATH).with_name(f".{store.local_path(PATH).name}.meta.json")
    for text in ("[1, 2]", "not json", '{"contentType": "image/png", "metadata": ["x"]}'):
        meta.write_text(text)
        (listed,) = store.list_objects("charts/")
        assert listed.metadata == {} and listed.name == PATH


def test_the_first_bytes_are_read_and_a_missing_object_is_a_read_error(tmp_path: Path) -> None:
    store = LocalArtifactStore(tmp_path, "bkt")
    store.create_png(PATH, PNG, metadata={})
    assert store.read_head(PATH, 8) == PNG[:8]
    with pytest.raises(ArtifactReadError, match="cannot read"):
        store.read_head("charts/run1/charts/gone.png", 8)
    with pytest.raises(ArtifactReadError):
        store.read_head("../../outside.png", 8)


def test_the_bucket_check_creates_nothing_and_refuses_a_folder_it_could_not_create(tmp_path: Path) -> None:
    LocalArtifactStore(tmp_path / "out", "bkt").check_bucket()
    assert not (tmp_path / "out").exists()  # it would be created by the first write
    (tmp_path / "file").write_text("x")
    with pytest.raises(BucketUnusable, match=r"cannot be created: .*file is not a folder"):
        LocalArtifactStore(tmp_path / "file" / "deeper", "bkt").check_bucket()
    if os.geteuid() != 0:  # root writes anywhere
        locked = tmp_path / "locked"
        (locked / "bkt").mkdir(parents=True)
        (locked / "bkt").chmod(0o500)
        with pytest.raises(BucketUnusable, match="not writable"):
            LocalArtifactStore(locked, "bkt").check_bucket()
