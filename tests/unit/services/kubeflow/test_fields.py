"""Reading a manifest field by field: what the translation never read is listed, each field
at the top-most place nobody read; typed readers refuse with the field's own path."""

from __future__ import annotations

import pytest

from gpupool.errors import KubeflowInvalid, KubeflowNotSupported
from gpupool.services.kubeflow._fields import NOT_USED, Fields, refuse_unstorable


def test_every_field_not_read_is_named_at_the_top_most_place() -> None:
    fields = Fields(
        {
            "apiVersion": "v",
            "kind": "K",
            "metadata": {"name": "x", "labels": {"a": "b"}},
            "spec": {"read": 1, "skipped": {"deep": 1}, "empty": {}, "none": None, "list": []},
        }
    )
    root = fields.root()
    metadata, spec = root.map("metadata"), root.map("spec")
    assert metadata is not None and spec is not None
    assert metadata.text("name") == "x" and spec.number("read") == 1
    assert [n.field for n in fields.leftovers()] == ["metadata.labels", "spec.skipped"]
    assert {n.message for n in fields.leftovers()} == {NOT_USED}


def test_a_notice_is_given_once_and_its_field_counts_as_read() -> None:
    fields = Fields({"spec": {"a": 1}})
    spec = fields.root().map("spec")
    assert spec is not None
    spec.ignore("a", "why")
    spec.ignore("a", "again")
    spec.ignore("absent", "never shown")
    assert [(n.field, n.message) for n in fields.all_notices()] == [("spec.a", "why")]


def test_lists_of_mappings_are_walked_item_by_item() -> None:
    fields = Fields({"items": [{"keep": 1, "drop": 2}]})
    [item] = fields.root().maps("items")
    assert item.number("keep") == 1
    assert [n.field for n in fields.leftovers()] == ["items.0.drop"]


@pytest.mark.parametrize(
    ("value", "read", "what"),
    [
        ({"n": "2"}, "number", "a whole number"),
        ({"n": True}, "number", "a whole number"),
        ({"n": -1}, "number", "a whole number"),
        ({"n": 1}, "text", "a string"),
        ({"n": "yes"}, "flag", "true or false"),
        ({"n": "a b"}, "strings", "a list of strings"),
        ({"n": [1, [2]]}, "strings", "a list of strings"),
        ({"n": [1]}, "map", "a mapping"),
        ({"n": {"a": 1}}, "maps", "a list of mappings"),
    ],
)
def test_a_value_of_the_wrong_type_is_refused_at_its_path(
    value: dict, read: str, what: str
) -> None:
    root = Fields({"spec": value}).root().map("spec")
    assert root is not None
    with pytest.raises(KubeflowInvalid) as raised:
        getattr(root, read)("n")
    assert raised.value.message.startswith(f"spec.n: give {what}")
    [field] = raised.value.details["fields"]
    assert field["field"] == "spec.n" and field["message"].startswith(f"give {what}")


def test_strings_take_bare_numbers_as_written_and_refusals_name_the_field() -> None:
    root = Fields({"args": ["-n", 2, 0.5]}).root()
    assert root.strings("args") == ("-n", "2", "0.5")
    with pytest.raises(KubeflowNotSupported, match="^args: not here$"):
        root.refuse("args", KubeflowNotSupported, "not here")


@pytest.mark.parametrize("bad", ["\x00", "\ud800"])
def test_text_that_cannot_be_stored_is_refused_at_its_path_escaped(bad: str) -> None:
    refuse_unstorable({"spec": {"args": ["ok", "a"]}, "metadata": {"name": "x"}})
    with pytest.raises(KubeflowInvalid) as raised:
        refuse_unstorable({"spec": {"args": ["ok", "a" + bad]}})
    assert raised.value.message.startswith("spec.args.1: character 2 is ")
    assert raised.value.details["fields"][0]["field"] == "spec.args.1"
    with pytest.raises(KubeflowInvalid) as raised:
        refuse_unstorable({"metadata": {"labels": {"k" + bad: "v"}}})
    assert raised.value.details["fields"][0]["field"] == f"metadata.labels.k\\u{ord(bad):04x}"
