"""API keys from the settings: the public development keys are live only while no key is
configured, configured keys are never printed, and blank or reserved tenant names are refused."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from agentconsole.serve import banner
from agentconsole.server.api.auth import KeyRing
from agentconsole.settings import InvalidSettings, Settings, load_settings_or_explain


def _settings(**auth: object) -> Settings:
    return Settings(auth=auth, runtime={"name": "sim"})  # type: ignore[arg-type]


def test_no_key_configured_runs_with_the_printed_development_keys() -> None:
    settings = _settings()
    assert settings.keys() == ({"sk-dev": "default"}, ["sk-operator"])
    text = banner(settings)
    assert "sk-dev" in text
    assert "sk-operator" in text


def test_configured_tenant_keys_leave_no_development_operator_key() -> None:
    settings = _settings(tenant_keys={"k-secret-1": "acme"})
    tenants, operators = settings.keys()
    assert tenants == {"k-secret-1": "acme"}
    assert operators == []
    assert "sk-operator" not in settings.server_config().operator_keys
    text = banner(settings)
    assert "k-secret-1" not in text  # a configured key is a secret: counted, never printed
    assert "sk-operator" not in text
    assert "1 configured (acme)" in text
    assert "operator routes refuse every call" in text


def test_configured_operator_keys_are_counted_not_printed() -> None:
    settings = _settings(tenant_keys={"k1": "acme"}, operator_keys=["op-secret"])
    assert settings.keys() == ({"k1": "acme"}, ["op-secret"])
    text = banner(settings)
    assert "op-secret" not in text
    assert "operator keys: 1 configured" in text


def test_the_demo_keys_stay_public_beside_configured_ones() -> None:
    settings = Settings(auth={"tenant_keys": {"k1": "acme"}}, demo=True)  # type: ignore[arg-type]
    tenants, _ = settings.keys()
    assert tenants["sk-tenant-a"] == "tenant-a"
    text = banner(settings)
    assert "sk-tenant-a" in text
    assert "k1 " not in text


def test_a_tenant_named_operator_is_refused() -> None:
    with pytest.raises(ValidationError, match="reserved"):
        _settings(tenant_keys={"k": "operator"})
    with pytest.raises(ValueError, match="reserved"):
        KeyRing({"k": "operator"}, ["op"])


@pytest.mark.parametrize("name", ["", "  ", "__probe__"])
def test_a_blank_or_reserved_tenant_name_is_refused(name: str) -> None:
    # "" is the registry's owner of platform tools and the tenant of events of no tenant:
    # a key of that tenant replaced platform tools and read every untenanted event
    with pytest.raises(InvalidSettings) as refused:
        load_settings_or_explain(
            overrides={
                "auth": {"tenant_keys": {"sk-secret-1": name, "sk-secret-2": "alpha"}},
                "runtime": {"name": "sim"},
            }
        )
    assert "auth.tenant_keys" in str(refused.value)
    assert f"tenant name {name!r} is" in str(refused.value)
    assert "sk-secret" not in str(refused.value)  # the error never echoes the keys


def test_a_key_listed_for_a_tenant_and_an_operator_is_refused_unechoed() -> None:
    """The key ring would take it for an operator's: a tenant given every operator power."""
    with pytest.raises(InvalidSettings) as refused:
        load_settings_or_explain(
            overrides={
                "auth": {"tenant_keys": {"sk-secret-1": "alpha"}, "operator_keys": ["sk-secret-1"]}
            }
        )
    assert "also listed in operator_keys" in str(refused.value)
    assert "alpha" in str(refused.value)
    assert "sk-secret" not in str(refused.value)


@pytest.mark.parametrize("name", ["", "  ", "__probe__"])
def test_the_key_ring_refuses_a_blank_or_reserved_tenant_name(name: str) -> None:
    # defence in depth: a KeyRing built from anything but the settings refuses them too
    with pytest.raises(ValueError, match=f"tenant name {name!r} is"):
        KeyRing({"sk-x": name}, [])


def test_every_tenant_limit_the_server_enforces_is_a_setting() -> None:
    """``[limits]`` (and a tenant's own table) names every field of the server's
    ``TenantLimits``: a limit added to the server and not here could not be set."""
    from dataclasses import fields

    from agentconsole.server.live.tenants import TenantLimits
    from agentconsole.settings import TenantLimitsSection

    assert {f.name for f in fields(TenantLimits)} <= set(TenantLimitsSection.model_fields)


def test_a_misspelt_settings_section_in_the_environment_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """pydantic-settings reads only the names it knows: ``serve`` ran with the default a
    misspelt section meant to change. Other tools' variables (no ``__``) are left alone."""
    monkeypatch.setenv("AGENTCONSOLE_RUNTIMES__POLICY", "fcfs")
    monkeypatch.setenv("AGENTCONSOLE_URL", "http://127.0.0.1:8000")
    with pytest.raises(InvalidSettings, match="AGENTCONSOLE_RUNTIMES__POLICY") as refused:
        load_settings_or_explain()
    assert "AGENTCONSOLE_URL" not in str(refused.value)
    assert "runtime" in str(refused.value)
    monkeypatch.delenv("AGENTCONSOLE_RUNTIMES__POLICY")
    monkeypatch.setenv("AGENTCONSOLE_RUNTIME__POLICY", "fcfs")
    assert load_settings_or_explain().runtime.policy == "fcfs"
