"""The Conan profiles of the platforms a build needs, on this host (see
eliza.core.conan_profiles for what they hold)."""

from __future__ import annotations

import os
from collections.abc import Iterable

from eliza.adapters.conan import ccache_dir, find_ccache
from eliza.app.project import current, host_facts
from eliza.core.conan_profiles import (
    BUILD_PROFILE,
    ProfileContext,
    build_profile,
    host_profile,
    host_profile_name,
)
from eliza.core.matrix import Platform


def profile_context() -> ProfileContext:
    ccache = find_ccache()
    return ProfileContext(
        jobs=os.cpu_count() or 2,
        ccache=ccache,
        ccache_dir=str(ccache_dir(current().cache)) if ccache else None,
    )


def conan_profiles_for(platforms: Iterable[Platform]) -> dict[str, str]:
    """name -> text: the build profile and each platform's host profile. ProfileError (a
    ValueError) names what a platform's profile lacks on this host."""
    context = profile_context()
    profiles = {BUILD_PROFILE: build_profile(context)}
    for platform in platforms:
        profiles[host_profile_name(platform)] = host_profile(platform, host_facts(), context)
    return profiles
