"""The JSON test reports a run uploaded, downloaded from its artifacts.

Each shard of a `gpu-tests.yml` run uploads the report `gpumatrix run --report` writes as an artifact named
`gpumatrix-report-<runner>-shard-<i>-of-<n>` (`REPORT_ARTIFACT_PREFIX`). What they add up to is
`gpumatrix.bot.report`'s to say; this module only fetches them.
"""

from __future__ import annotations

from typing import Protocol

from gpumatrix.bot.github import ArtifactInfo
from gpumatrix.bot.report import REPORT_ARTIFACT_PREFIX

__all__ = ["ArtifactClient", "run_report_documents"]


class ArtifactClient(Protocol):
    def run_artifacts(self, run_id: int) -> list[ArtifactInfo]: ...

    def download_artifact(self, artifact_id: int) -> dict[str, bytes]: ...


def run_report_documents(client: ArtifactClient, run_id: int) -> list[tuple[str, bytes]]:
    """(artifact/file name, bytes) of every JSON test report a run uploaded (`gpumatrix-report-*` artifacts
    that have not expired); a `GitHubApiError` when they cannot be listed or downloaded."""
    documents = []
    for artifact in client.run_artifacts(run_id):
        if artifact.name.startswith(REPORT_ARTIFACT_PREFIX) and not artifact.expired:
            documents += [
                (f"{artifact.name}/{name}", data)
                for name, data in client.download_artifact(artifact.id).items()
                if name.endswith(".json")
            ]
    return documents
