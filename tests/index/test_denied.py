"""The deny list (rifflux.index.denied): which paths are secrets, as a pure function."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rifflux.index.denied import (
    SECRET_DIRS,
    refused_secret,
    secret_reason,
    secret_rule,
)

SECRETS = {
    "/home/me/.ssh/id_rsa": ".ssh",
    "/home/me/.ssh/config": ".ssh",
    "/home/me/.gnupg/pubring.kbx": ".gnupg",
    "/home/me/.aws/credentials": ".aws",
    "/home/me/.azure/accessTokens.json": ".azure",
    "/home/me/.kube/config": ".kube",
    "/home/me/.docker/config.json": ".docker",
    "/home/me/.config/gcloud/credentials.db": ".config/gcloud",
    "/home/me/.password-store/bank.gpg": ".password-store",
    "/repo/deploy/id_ed25519": "id_*",
    "/repo/deploy/id_rsa.pub": "id_*",
    "/repo/tls/server.pem": "*.pem",
    "/repo/tls/server.key": "*.key",
    "/repo/tls/client.p12": "*.p12",
    "/repo/.env": ".env*",
    "/repo/.env.production": ".env*",
    "/home/me/.netrc": ".netrc",
    "/home/me/.pgpass": ".pgpass",
    # Case-insensitive: the same files on a case-insensitive disk.
    "/Users/me/.SSH/notes.md": ".ssh",
    "/repo/ID_RSA": "id_*",
    "/repo/Server.PEM": "*.pem",
    "relative/.aws/notes.md": ".aws",
}
HARMLESS = [
    "/home/me/notes/ssh.md",
    "/home/me/.config/other/gcloud/x.md",
    "/home/me/gcloud/.config/x.md",
    "/repo/docs/keys.md",
    "/repo/docs/monkey.md",
    "/repo/docs/environment.md",
    "/repo/docs/netrc.md",
    "/repo/docs/server.key.md",
    "/repo/docs/pem.txt",
    "/repo/identity.md",
    "/",
    "",
]


@pytest.mark.parametrize(("path", "rule"), sorted(SECRETS.items()))
def test_secret_paths_name_the_rule_they_match(path: str, rule: str) -> None:
    assert secret_rule(path) == rule


@pytest.mark.parametrize("path", HARMLESS)
def test_ordinary_paths_are_not_secret(path: str) -> None:
    assert secret_rule(path) is None


def test_name_rules_apply_to_files_directory_rules_to_every_component() -> None:
    assert secret_rule("/repo/certs.key/readme.md") is None
    assert secret_rule("/repo/id_docs", is_dir=True) is None
    assert secret_rule("/repo/id_docs") == "id_*"
    assert secret_rule("/home/me/.ssh", is_dir=True) == ".ssh"
    assert secret_rule("/home/me/.config/gcloud", is_dir=True) == ".config/gcloud"


def test_the_override_and_the_reason() -> None:
    paths = ["/repo/docs/install.md", "/home/me/.ssh/id_rsa"]
    assert refused_secret(paths) == ".ssh"
    assert refused_secret(paths, allow=True) is None
    assert secret_reason(".ssh") == (
        "secret path (.ssh); set RIFFLUX_ALLOW_SECRET_PATHS=1 to index it"
    )
    assert secret_reason("id_*", "serve").endswith("to serve it")


_component = st.text(alphabet="abcdefgh._-", min_size=1, max_size=8).filter(
    lambda c: c not in (".", "..")
)


@settings(max_examples=200, deadline=None)
@given(
    before=st.lists(_component, max_size=4),
    secret=st.sampled_from(SECRET_DIRS),
    after=st.lists(_component, min_size=1, max_size=4),
    upper=st.booleans(),
)
def test_a_secret_directory_anywhere_in_a_path_is_refused(
    before: list[str], secret: str, after: list[str], upper: bool
) -> None:
    name = secret.upper() if upper else secret
    path = "/" + "/".join([*before, name, *after])
    assert secret_rule(path) is not None
    assert secret_rule(path, is_dir=True) is not None
