"""What the access middleware may still trust while the database cannot be asked."""
from __future__ import annotations

import time

from app.auth import vouched_credentials
from app.auth.principal import Principal
from app.auth.vouched_credentials import VouchedCredentials

ALICE = Principal(name="alice", is_admin=False)
BOB = Principal(name="bob", is_admin=True)


def test_a_credential_checked_a_moment_ago_is_vouched_for_with_its_account():
    vouched = VouchedCredentials()
    vouched.remember("bearer:tok-a", ALICE)
    vouched.remember("session:cookie-b", BOB)
    assert vouched.principal_for("bearer:tok-a") == ALICE
    assert vouched.principal_for("session:cookie-b") == BOB
    assert vouched.principal_for("bearer:never-seen") is None
    assert vouched.principal_for(None) is None


def test_a_credential_is_not_vouched_for_past_the_grace_period():
    vouched = VouchedCredentials(grace_seconds=0.2)
    vouched.remember("bearer:tok-a", ALICE)
    assert vouched.principal_for("bearer:tok-a") == ALICE
    time.sleep(0.3)
    assert vouched.principal_for("bearer:tok-a") is None


def test_a_credential_refused_since_is_forgotten():
    vouched = VouchedCredentials()
    vouched.remember("bearer:tok-a", ALICE)
    vouched.forget("bearer:tok-a")
    vouched.forget(None)  # nothing presented: nothing to forget
    assert vouched.principal_for("bearer:tok-a") is None


def test_no_secret_is_kept_in_memory_only_its_digest():
    vouched = VouchedCredentials()
    vouched.remember("bearer:the-secret-token", ALICE)
    vouched.remember(None, BOB)  # no credential: nothing to remember
    kept = repr(vouched._seen)
    assert "the-secret-token" not in kept
    assert len(vouched._seen) == 1


def test_past_the_bound_the_stale_entries_go_and_the_live_stay(monkeypatch):
    monkeypatch.setattr(vouched_credentials, "MAX_VOUCHED", 3)
    vouched = VouchedCredentials(grace_seconds=0.2)
    vouched.remember("bearer:old-1", ALICE)
    vouched.remember("bearer:old-2", ALICE)
    time.sleep(0.3)
    vouched.remember("bearer:new-1", BOB)
    vouched.remember("bearer:new-2", BOB)  # the fourth: past the bound, the stale two go
    assert len(vouched._seen) == 2
    assert vouched.principal_for("bearer:new-1") == BOB
    assert vouched.principal_for("bearer:new-2") == BOB
