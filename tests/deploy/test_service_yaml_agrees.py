"""deploy/cloudrun.service.yaml and deploy.sh's `gcloud run deploy` describe the same worker
service: the YAML is rendered with deploy.sh's own resolved configuration (--print-config) and
compared with the dry run's flags, setting by setting, for the defaults and for other knobs."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import mini_yaml
import pytest
from test_deploy_dry_run import dry_run, env_pairs, flag

from harness.builders import REPO

YAML = REPO / "deploy" / "cloudrun.service.yaml"


def render(config: dict[str, str]) -> dict[str, Any]:
    text = YAML.read_text()
    missing = sorted(set(re.findall(r"\$\{(\w+)\}", text)) - set(config))
    assert not missing, f"placeholders deploy.sh --print-config does not resolve: {missing}"
    return dict(mini_yaml.load(re.sub(r"\$\{(\w+)\}", lambda m: config[m[1]], text)))


@pytest.mark.parametrize(
    "knobs",
    [
        {},
        {
            "REQUEST_TIMEOUT_SECONDS": "540",
            "FINALIZE_BUDGET_SECONDS": "45",
            "CONCURRENCY": "2",
            "MAX_INSTANCES": "20",
            "MIN_INSTANCES": "1",
            "CPU": "2",
            "MEMORY": "1Gi",
            "APP_ENV": "staging",
            "SECRET_NAME": "other-accounts",
            "SERVICE": "charts-worker",
        },
    ],
)
def test_yaml_and_gcloud_run_deploy_agree(tmp_path: Path, knobs: dict[str, str]) -> None:
    knobs = {**knobs, "SECRET_VERSION": "3"}  # the version to mount: the YAML names one, as deploy.sh does
    run = dry_run(tmp_path, **knobs)
    service = run.config["SERVICE"]
    deploy = run.one("gcloud", "run", "deploy", service)
    spec = render(run.config)

    template = spec["spec"]["template"]
    annotations = template["metadata"]["annotations"]
    pod = template["spec"]
    [container] = pod["containers"]
    plain_env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    [secret_env] = [e for e in container["env"] if "valueFrom" in e]
    secret = secret_env["valueFrom"]["secretKeyRef"]

    assert spec["metadata"]["name"] == service
    assert spec["metadata"]["labels"]["cloud.googleapis.com/location"] == flag(deploy, "region")
    assert spec["metadata"]["annotations"]["run.googleapis.com/ingress"] == flag(deploy, "ingress")
    assert container["image"] == flag(deploy, "image")
    assert pod["serviceAccountName"] == flag(deploy, "service-account")
    assert pod["timeoutSeconds"] == flag(deploy, "timeout")
    assert pod["containerConcurrency"] == flag(deploy, "concurrency")
    assert annotations["autoscaling.knative.dev/maxScale"] == flag(deploy, "max-instances")
    assert annotations["autoscaling.knative.dev/minScale"] == flag(deploy, "min-instances")
    assert (annotations["run.googleapis.com/startup-cpu-boost"] == "true") == ("--cpu-boost" in deploy)
    assert annotations["run.googleapis.com/execution-environment"] == flag(deploy, "execution-environment")
    assert container["resources"]["limits"] == {"cpu": flag(deploy, "cpu"), "memory": flag(deploy, "memory")}
    assert plain_env == env_pairs(flag(deploy, "set-env-vars") or "")
    assert f"{secret_env['name']}={secret['name']}:{secret['key']}" == flag(deploy, "set-secrets")
    # and the values are the knobs that were asked for
    for knob, value in knobs.items():
        assert run.config[knob] == value


def test_mini_yaml_reads_what_it_claims_and_refuses_the_rest() -> None:
    assert mini_yaml.load('a:\n  b: "1"\n  c:\n    - name: x\n      value: y # note\n    - name: z\n') == {
        "a": {"b": "1", "c": [{"name": "x", "value": "y"}, {"name": "z"}]}
    }
    with pytest.raises(ValueError):
        mini_yaml.load("a: [1, 2]\n")
