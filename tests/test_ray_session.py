"""fedlib.ray_grid.ray_session starts a local Ray node again when it misses Ray's fixed 30 s
registration window (a busy machine), and only then; a fake Ray module stands in for Ray."""
import pytest

from fedlib import ray_grid

TIMEOUT = Exception("The current node timed out during startup. This could happen because some of the "
                    "raylet failed to startup or the GCS has become overloaded.")


class FakeRay:
    def __init__(self, failures):
        self.failures = list(failures)  # what each init raises, in order, then success
        self.inits, self.shutdowns = [], 0

    def is_initialized(self):
        return False

    def init(self, **kwargs):
        self.inits.append(kwargs)
        if self.failures:
            raise self.failures.pop(0)

    def shutdown(self):
        self.shutdowns += 1


@pytest.fixture
def fake(monkeypatch):
    def make(failures):
        ray = FakeRay(failures)
        monkeypatch.setattr(ray_grid, "_ray", lambda: ray)
        monkeypatch.delenv("RAY_ADDRESS", raising=False)
        return ray
    return make


def test_a_local_node_that_misses_the_window_is_started_again(fake, capsys):
    ray = fake([TIMEOUT, TIMEOUT])
    assert ray_grid.ray_session() == (ray, True)
    assert len(ray.inits) == 3 and ray.shutdowns == 2
    assert capsys.readouterr().err.count("starting it again") == 2


def test_the_last_attempt_raises_rays_error(fake):
    ray = fake([TIMEOUT] * ray_grid.START_ATTEMPTS)
    with pytest.raises(Exception, match="timed out during startup"):
        ray_grid.ray_session()
    assert len(ray.inits) == ray_grid.START_ATTEMPTS


def test_other_errors_and_cluster_addresses_are_not_retried(fake):
    ray = fake([RuntimeError("bad object store size")])
    with pytest.raises(RuntimeError, match="object store"):
        ray_grid.ray_session()
    assert len(ray.inits) == 1
    ray = fake([TIMEOUT])
    with pytest.raises(Exception, match="timed out during startup"):
        ray_grid.ray_session("ray://head:10001")
    assert len(ray.inits) == 1 and ray.shutdowns == 0
