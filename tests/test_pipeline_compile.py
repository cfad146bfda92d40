"""Pipelines compile to graph documents: each job key onto its node field, top-level
keys onto the graph's, and every refusal as one line naming the job and the key. No
database here: the runs themselves are in tests/server and tests/e2e test_pipelines."""

from __future__ import annotations

import textwrap
from typing import Any

import pytest

from cryopg.pipelines import PipelineError, compile_pipeline, is_pipeline, to_graph
from cryopg.pipelines.compile import load

HEAD = "version: cryosleep/pipeline/v1\n"


def graph_of(text: str) -> dict[str, Any]:
    source = HEAD + textwrap.dedent(text)
    compile_pipeline(source)  # the graph tier accepts what to_graph made
    return to_graph(load(source))


def node(text: str, job: str = "a") -> dict[str, Any]:
    return next(n for n in graph_of(text)["nodes"] if n["id"] == job)


def refused(text: str, *, head: bool = True) -> str:
    with pytest.raises(PipelineError) as got:
        compile_pipeline((HEAD if head else "") + textwrap.dedent(text))
    message = str(got.value)
    assert "\n" not in message
    return message


def test_steps_are_one_shell_node_joined_in_order() -> None:
    n = node("""
        jobs:
          a: {steps: [{run: make}, {name: test, run: "make test"}, "echo done"]}
    """)
    assert n["type"] == "shell"
    assert n["config"] == {"run": "# step 1\nmake\n# step 2: test\nmake test\n# step 3\necho done"}


def test_templates_in_steps_and_fan_out_items() -> None:
    n = node("""
        jobs:
          a:
            fan_out: {items: input.recipients, max_parallel: 2}
            steps: [{run: "./notify.sh {{ item }} {{ input.env }}"}]
    """)
    assert n["fan_out"] == {"items": "input.recipients", "max_parallel": 2}
    assert n["config"]["run"] == {"$template": "# step 1\n./notify.sh {{ item }} {{ input.env }}"}


def test_json_and_escaped_braces_in_steps() -> None:
    source = HEAD + textwrap.dedent("""
        jobs:
          a: {steps: ["curl -d '{\\"a\\": {\\"b\\": 1}}' {{ input.url }}",
                      "docker inspect -f '{{ '{{' }}.State{{ '}}' }}' x", "echo '{\\"c\\": {}}'"]}
    """)
    parts = compile_pipeline(source).document["configs"]["a"]["run"]["$template"]["tpl"]
    assert parts == ["# step 1\ncurl -d '{\"a\": {\"b\": 1}}' ", {"path": ["input", "url"]},
                     "\n# step 2\ndocker inspect -f '", {"lit": "{{"}, ".State", {"lit": "}}"},
                     "' x\n# step 3\necho '{\"c\": {}}'"]
    plain = node("""jobs: {a: {steps: ["echo '{\\"c\\": {\\"d\\": 1}}'"]}}""")
    assert plain["config"]["run"] == "# step 1\necho '{\"c\": {\"d\": 1}}'"


def test_needs_are_edges_and_node_fields_carry_over() -> None:
    g = graph_of("""
        jobs:
          build: {steps: [make]}
          test: {needs: build, steps: [make test]}
          deploy:
            needs: [build, test]
            if: "input.env != 'none'"
            retry: {attempts: 3, backoff: 10s}
            concurrency: "deploy-{{ input.env }}"
            script: deploy.py
            input: {env: "{{ input.env }}", n: 1}
    """)
    assert g["edges"] == [{"from": "build", "to": "test"}, {"from": "build", "to": "deploy"},
                          {"from": "test", "to": "deploy"}]
    deploy = g["nodes"][2]
    assert deploy == {"id": "deploy", "type": "script", "if": "input.env != 'none'",
                      "retry": {"attempts": 3, "backoff": "10s"},
                      "concurrency": "deploy-{{ input.env }}",
                      "config": {"workflow": "deploy.py",
                                 "input": {"env": {"$template": "{{ input.env }}"}, "n": 1}}}


def test_if_false_in_yaml_is_the_expression_false() -> None:
    assert node("jobs: {a: {if: false, steps: [x]}}")["if"] == "false"


def test_env_merges_pipeline_into_job_and_the_job_wins() -> None:
    g = graph_of("""
        env: {REGION: eu, TIER: 1, DEBUG: true}
        jobs:
          a: {steps: [x], env: {REGION: us, WHO: "{{ input.who }}"}}
          b: {steps: [y]}
          c: {state: {op: get, key: k}}
    """)
    a, b, c = g["nodes"]
    assert a["config"]["env"] == {"REGION": "us", "TIER": "1", "DEBUG": "true",
                                  "WHO": {"$template": "{{ input.who }}"}}
    assert b["config"]["env"] == {"REGION": "eu", "TIER": "1", "DEBUG": "true"}
    assert "env" not in c["config"]


def test_inline_script_and_stored_workflow_and_graph() -> None:
    g = graph_of("""
        jobs:
          inline: {script: {source: "print(1)", filename: x.py}}
          stored: {script: report.sh}
          sub: {workflow: child, input: {n: 7}}
    """)
    assert [n["config"] for n in g["nodes"]] == [
        {"source": "print(1)", "filename": "x.py"}, {"workflow": "report.sh"},
        {"graph": "child", "input": {"n": 7}}]
    assert [n["type"] for n in g["nodes"]] == ["script", "script", "workflow"]


def test_waits_approval_state_http() -> None:
    g = graph_of("""
        jobs:
          ev: {wait_for_event: {name: pr.closed, timeout: 7d}}
          ev2: {wait_for_event: deploy.done}
          sig: {wait_for_signal: {name: go}}
          nap: {sleep: 10m}
          ok: {approval: {fields: {type: object, properties: {go: {type: boolean}}}}}
          led: {state: {op: add, key: "seen-{{ input.id }}", entity: ledger}}
          web: {http: {method: POST, url: "{{ input.url }}", body: {a: 1}}}
    """)
    got = {n["id"]: (n["type"], n["config"]) for n in g["nodes"]}
    assert got == {
        "ev": ("wait", {"event": "pr.closed", "timeout": "7d"}),
        "ev2": ("wait", {"event": "deploy.done"}),
        "sig": ("wait", {"signal": "go"}),
        "nap": ("wait", {"sleep": "10m"}),
        "ok": ("approval", {"fields": {"type": "object",
                                       "properties": {"go": {"type": "boolean"}}}}),
        "led": ("state", {"op": "add", "key": {"$template": "seen-{{ input.id }}"},
                          "entity": "ledger"}),
        "web": ("http", {"method": "POST", "url": {"$template": "{{ input.url }}"},
                         "body": {"a": 1}})}


def test_run_level_keys_reach_the_graph_and_its_structure() -> None:
    source = HEAD + textwrap.dedent("""
        name: ci
        if: "trigger.ref == 'refs/heads/main'"
        concurrency: "deploy-{{ input.env }}"
        cancel_on: {event: pr.closed}
        on:
          schedule: "*/5 * * * *"
          webhook: [push, pull_request]
          event: order.created
        output: nodes.a.output
        jobs: {a: {steps: [x]}}
    """)
    g = to_graph(load(source))
    assert g["if"] == "trigger.ref == 'refs/heads/main'"
    assert g["concurrency"] == "deploy-{{ input.env }}"
    assert g["cancel_on"] == {"event": "pr.closed"} and g["name"] == "ci"
    assert g["on"] == {"schedule": "*/5 * * * *", "webhook": ["push", "pull_request"],
                       "event": "order.created"}
    s = compile_pipeline(source).structure
    assert s["pipeline"] == "cryosleep/pipeline/v1"
    assert s["on"]["event"] == ["order.created"] and s["cancel_on"] == {"event": "pr.closed"}
    assert s["if"]["op"] == "==" and s["concurrency"]["tpl"][0] == "deploy-"
    assert s["output"] == {"path": ["nodes", "a", "output"]}


def test_on_yes_no_and_dates_stay_text() -> None:
    doc = load(HEAD + "on: {event: x}\njobs: {a: {steps: [echo yes, 'no']}}\nname: 2026-01-01\n")
    assert "on" in doc and doc["name"] == "2026-01-01"
    assert doc["jobs"]["a"]["steps"] == ["echo yes", "no"]


@pytest.mark.parametrize("text,message", [
    ("jobs: {deploy: {needs: [buidl], steps: [x]}}", "job deploy: needs: 'buidl' names no job"),
    ("jobs: {a: {steps: [x], timeout-minutes: 3}}", "job a: timeout-minutes: unknown key"),
    ("jobs: {a: {steps: [x], script: y}}", "job a: steps/script/"),
    ("jobs: {a: {if: 'true'}}", "job a: steps/script/approval/"),
    ("jobs: {a: [x]}", "job a: a job is a mapping"),
    ("jobs: {a: {needs: b, steps: [x]}, b: {needs: a, steps: [y]}}",
     "job a: needs: a cycle (a -> b -> a)"),
    ("jobs: {a: {if: 'input.x ==', steps: [x]}}", "job a: if: "),
    ("jobs: {a: {if: 'nodes.zz.output', steps: [x]}}", "job a: if: no job 'zz' in this pipeline"),
    ("jobs: {a: {steps: ['echo {{ input.x']}}", "job a: steps: unbalanced"),
    ("jobs: {a: {steps: [{cmd: x}]}}", "job a: steps[0]: a step is {run: COMMAND}"),
    ("jobs: {a: {state: {op: add, key: k}}}", "job a: state.entity is required for add"),
    ("jobs: {a: {state: {op: get, key: k, colour: red}}}", "job a: state.colour: unknown key"),
    ("jobs: {a: {approval: {fields: {type: 12}}}}", "job a: approval.fields is not a JSON Schema"),
    ("jobs: {a: {wait_for_event: {name: x, timeout: soon}}}",
     "job a: wait_for_event.timeout: 'soon' is not a duration"),
    ("jobs: {a: {sleep: forever}}", "job a: sleep: 'forever' is not a duration"),
    ("jobs: {a: {retry: {attempts: 0}, steps: [x]}}",
     "job a: retry.attempts: 0 is less than the minimum of 1"),
    ("jobs: {a: {fan_out: {items: 'input.', max_parallel: 1}, steps: [x]}}", "job a: fan_out: "),
    ("jobs: {a: {script: x.py, env: {A: b}}}", "job a: env: only a job with steps"),
    ("jobs: {a: {steps: [x], env: {A-B: c}}}", "job a: env: 'A-B' is not a variable name"),
    ("jobs: {a: {steps: [x], input: {}}}", "job a: input: only script and workflow jobs"),
    ("jobs: {'a b': {steps: [x]}}", "job 'a b': a job's name is 1-64 letters"),
    ("jobs: {}", "jobs: a pipeline needs a mapping of at least one job"),
    ("colour: red\njobs: {a: {steps: [x]}}", "colour: unknown top-level key"),
    ("if: 'nodes.a.output'\njobs: {a: {steps: [x]}}",
     "if: the top-level if reads trigger and input only"),
    ("concurrency: 'g-{{ input.'\njobs: {a: {steps: [x]}}", "concurrency: "),
    ("cancel_on: pr.closed\njobs: {a: {steps: [x]}}", "cancel_on: must be"),
    ("on: {cron: x}\njobs: {a: {steps: [x]}}", "on: must be an object"),
])
def test_each_kind_of_error_is_one_line_naming_job_and_key(text: str, message: str) -> None:
    got = refused(text)
    assert got.startswith(message), got
    assert "node" not in got.replace("nodes.", ""), got  # a pipeline user's words


@pytest.mark.parametrize("text,message", [
    ("version: cryosleep/pipeline/v2\njobs: {a: {steps: [x]}}",
     "version: must be cryosleep/pipeline/v1 (got 'cryosleep/pipeline/v2')"),
    ("jobs: {a: {steps: [x]}}", "version: must be cryosleep/pipeline/v1 (got None)"),
    ("version: cryosleep/pipeline/v1\njobs:\n  a: {steps: [x]\n", "not valid YAML: line "),
    ("version: cryosleep/pipeline/v1\njobs: {a: {steps: [x]}}\njobs: {}\n",
     "line 3: key 'jobs' is given twice"),
    ("- just\n- a list\n", "a pipeline is a YAML mapping"),
    ("version: cryosleep/pipeline/v1\n---\nversion: x\n", "a pipeline file holds exactly one"),
    ("version: !!python/object:os.system x\n", "not valid YAML"),
    ("version: cryosleep/pipeline/v1\nx: .nan\njobs: {a: {steps: [x]}}",
     "nan is not a JSON number"),
])
def test_bad_yaml_and_wrong_versions(text: str, message: str) -> None:
    got = refused(text, head=False)
    assert message in got, got


def test_an_alias_bomb_is_refused_not_expanded() -> None:
    lines = ["version: cryosleep/pipeline/v1", "a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}]"
              for i in range(1, 12)]
    assert "expands to more than" in refused("\n".join(lines) + "\n", head=False)


def test_detection_by_extension_or_version_line() -> None:
    assert is_pipeline("echo hi", "ci.yml") and is_pipeline("x", "CI.YAML")
    assert is_pipeline("# ci\nversion: 'cryosleep/pipeline/v1'\n", "pipeline.txt")
    assert is_pipeline("#!/usr/bin/env cryopg\n---\n\nversion: cryosleep/pipeline/v1\n")
    assert not is_pipeline("echo version: cryosleep/pipeline/v1", "job.sh")
    heredoc = "cat > ci.yaml <<'Y'\nversion: cryosleep/pipeline/v1\njobs: {}\nY\n"
    assert not is_pipeline(heredoc, "make-ci.sh") and not is_pipeline(heredoc)
    assert not is_pipeline('{"version": "cryosleep-graph/v1"}', "g.json")


def test_failure_keys_carry_over_to_the_graph() -> None:
    compiled = compile_pipeline(textwrap.dedent("""\
        version: cryosleep/pipeline/v1
        on_failure: [alert]
        jobs:
          build: {steps: ["make"], continue_on_error: true}
          clean: {steps: ["rm -rf out"], needs: build, always: true}
          alert: {steps: ["echo failed"]}
        """))
    nodes = {n["id"]: n for n in compiled.structure["nodes"]}
    assert nodes["build"].get("continue_on_error") is True
    assert nodes["clean"].get("always") is True
    assert nodes["alert"].get("on_failure") is True
    with pytest.raises(PipelineError, match="on_failure"):
        compile_pipeline("version: cryosleep/pipeline/v1\non_failure: nope\n"
                         "jobs:\n  a: {steps: [\"true\"]}\n")


def test_a_connector_job_is_a_connector_node() -> None:
    g = graph_of("""
        jobs:
          short: {connector: gh}
          issue:
            connector:
              connection: gh
              method: POST
              path: "/repos/{{ input.repo }}/issues"
              query: {state: open}
              body: {title: "{{ input.title }}"}
    """)
    got = {n["id"]: (n["type"], n["config"]) for n in g["nodes"]}
    assert got == {
        "short": ("connector", {"connection": "gh"}),
        "issue": ("connector", {"connection": "gh", "method": "POST",
                                "path": {"$template": "/repos/{{ input.repo }}/issues"},
                                "query": {"state": "open"},
                                "body": {"title": {"$template": "{{ input.title }}"}}})}


@pytest.mark.parametrize("text,message", [
    ("jobs: {a: {connector: {connection: 'GH!'}}}", "job a: connector.connection must be a "),
    ("jobs: {a: {connector: {connection: 'gh-{{ input.x }}'}}}",
     "job a: connector.connection: must be a connection's name, given literally"),
    ("jobs: {a: {connector: {path: /x}}}", "job a: connector: a connection's name, or "),
    ("jobs: {a: {connector: {connection: gh, url: x}}}", "job a: connector.url: unknown key"),
    ("jobs: {a: {connector: {connection: gh, method: FETCH}}}",
     "job a: connector.method must be GET, POST"),
    ("jobs: {a: {connector: gh, steps: [x]}}", "job a: steps/script/"),
])
def test_a_bad_connector_job_is_one_line(text: str, message: str) -> None:
    got = refused(text)
    assert got.startswith(message), got
    assert "node" not in got, got


def test_a_jobs_timeout_and_retry_policy_reach_its_node() -> None:
    """A job's timeout and its exponential retry with retry_if compile onto its node; the
    pipeline's own timeout onto the graph (docs/pipelines.md)."""
    got = compile_pipeline(
        "version: cryosleep/pipeline/v1\ntimeout: 30m\njobs:\n"
        "  a:\n    steps: [make]\n    timeout: 90s\n"
        "    retry: {attempts: 3, backoff: exponential, delay: 2s, max_delay: 1m,"
        " retry_if: 'failure.exit_code == 124'}\n")
    node = got.structure["nodes"][0]
    assert got.structure["timeout"] == 1800 and node["timeout"] == 90
    assert {k: v for k, v in node["retry"].items() if k != "retry_if"} == {
        "attempts": 3, "backoff": 2, "factor": 2, "max_delay": 60}
    with pytest.raises(PipelineError, match="job w: .*timeout"):
        compile_pipeline("version: cryosleep/pipeline/v1\njobs:\n"
                         "  w:\n    sleep: 5s\n    timeout: 1s\n")
