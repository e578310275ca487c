"""The template sandbox: no Python internals, no mutation, no silent undefined values."""

from __future__ import annotations

import shlex

import pytest

from ascendctl.playbook.templating import Templar, TemplateError, split_command

VARS = {"name": "node0", "items": [1, 2, 3], "cfg": {"mtu": 9000},
        "path": "/srv/x y$(touch /tmp/CANARY)", "result": {"rc": 0, "failed": False,
                                                            "changed": True}}


@pytest.fixture
def templar(tmp_path):
    (tmp_path / "t.j2").write_text("host={{ name }}\n{% for i in items %}{{ i }}\n{% endfor %}")
    (tmp_path / "evil.j2").write_text("{{ ''.__class__.__mro__[1].__subclasses__() }}")
    return Templar([tmp_path])


@pytest.mark.parametrize("expression", [
    "''.__class__.__mro__",
    "name.__class__.__base__.__subclasses__()",
    "cfg.__init__.__globals__",
    "lipsum.__globals__",
    "cycler.__init__.__globals__.os",
    "items.__class__.__mro__[1].__subclasses__()",
    "range.__self__",
])
def test_python_internals_are_blocked(templar, expression):
    with pytest.raises(TemplateError) as info:
        templar.expr(expression, VARS)
    assert "sandbox" in str(info.value) or "undefined" in str(info.value)


@pytest.mark.parametrize("expression", ["items.append(4)", "cfg.update({'mtu': 1})",
                                        "cfg.pop('mtu')", "items.clear()"])
def test_data_cannot_be_mutated(templar, expression):
    with pytest.raises(TemplateError, match="sandbox"):
        templar.expr(expression, VARS)
    assert VARS["items"] == [1, 2, 3] and VARS["cfg"] == {"mtu": 9000}


def test_template_files_are_sandboxed_too(templar):
    with pytest.raises(TemplateError, match="sandbox"):
        templar.render_file("evil.j2", VARS)
    assert templar.render_file("t.j2", VARS) == "host=node0\n1\n2\n3\n"
    with pytest.raises(TemplateError, match="not found"):
        templar.render_file("nope.j2", VARS)


def test_undefined_is_an_error_not_an_empty_string(templar):
    with pytest.raises(TemplateError, match="undefined"):
        templar.render("a{{ nmae }}b", VARS)
    with pytest.raises(TemplateError, match="undefined"):
        templar.truth("nmae == 'node0'", VARS)
    with pytest.raises(TemplateError, match="undefined"):
        templar.expr("cfg.mut", VARS)
    assert templar.expr("cfg.mut | default(1500)", VARS) == 1500


def test_single_expressions_keep_their_type(templar):
    assert templar.render("{{ items }}", VARS) == [1, 2, 3]
    assert templar.render(" {{ cfg.mtu }} ", VARS) == 9000
    assert templar.render("mtu={{ cfg.mtu }}", VARS) == "mtu=9000"
    assert templar.render({"a": ["{{ name }}", 5]}, VARS) == {"a": ["node0", 5]}
    assert templar.render("no template", VARS) == "no template"


def test_rendered_values_are_not_rendered_again(templar):
    variables = dict(VARS, sneaky="{{ ''.__class__ }}")
    assert templar.render("x {{ sneaky }}", variables) == "x {{ ''.__class__ }}"


def test_conditions_lists_are_anded(templar):
    assert templar.truth(["result.rc == 0", "name == 'node0'"], VARS) is True
    assert templar.truth(["result.rc == 0", "name == 'node1'"], VARS) is False
    assert templar.truth(True, VARS) is True


def test_filters_and_tests(templar):
    assert templar.expr("path | quote", VARS) == shlex.quote(VARS["path"])
    assert templar.expr("result is succeeded and result is changed", VARS)
    assert not templar.expr("result is failed", VARS)
    assert templar.expr("'24.1.rc3' is version('24.1.rc2', '>')", VARS)
    assert templar.expr("'8.0.RC1' is version('8.1.RC1', '<')", VARS)
    assert templar.expr("'a: 1' | from_yaml", VARS) == {"a": 1}
    assert templar.expr("cfg | to_json", VARS) == '{"mtu": 9000}'
    assert templar.expr("'abc123' | regex_search('[0-9]+')", VARS) == "123"
    with pytest.raises(TemplateError, match="quote"):
        templar.expr("cfg | quote", VARS)


def test_unquoted_outputs_are_found_in_shell_scripts(templar):
    assert templar.unquoted_outputs("ls {{ path | quote }} && echo done") == []
    bad = templar.unquoted_outputs("ls {{ path }}\nrm {{ path | quote }}")
    assert bad == ["ls {{ path }}"]
    assert templar.unquoted_outputs("{% if x %}ls {{ y | upper }}{% endif %}")


def test_split_command_keeps_each_value_inside_its_word():
    words = split_command("ls -l '{{ a }}' --x={{ b | default('p q') }} \"c d\"")
    assert words == ["ls", "-l", "{{ a }}", "--x={{ b | default('p q') }}", "c d"]


def test_syntax_errors_are_reported(templar):
    with pytest.raises(TemplateError, match="syntax"):
        templar.check_expression("a ==")
    with pytest.raises(TemplateError, match="syntax"):
        templar.check_template("{{ a ")
