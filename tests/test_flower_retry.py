"""fedlib.flower's simulation starts again when Ray's local node misses its 30 s start-up window
(as fedlib.ray_grid.ray_session does): the error arrives wrapped in Flower's RuntimeErrors."""
import pytest

from fedlib.flower.simulation import retry_ray_startup, startup_timed_out


def flower_wrapped(message: str) -> RuntimeError:
    """An error as flwr's run_simulation raises it: RuntimeError from RuntimeError from Ray's."""
    try:
        try:
            try:
                raise Exception(message)
            except Exception as ray_error:
                raise RuntimeError("Simulation Runtime crashed.") from ray_error
        except RuntimeError as crashed:
            raise RuntimeError("An error was encountered. Ending simulation.") from crashed
    except RuntimeError as outer:
        return outer


def test_startup_timeout_is_found_through_the_wrapping():
    assert startup_timed_out(flower_wrapped("The current node timed out during startup. This could happen ..."))
    assert not startup_timed_out(flower_wrapped("some other failure"))
    assert not startup_timed_out(ValueError("timed out"))


def test_retry_only_on_the_startup_timeout_and_at_most_attempts_times():
    calls = []

    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise flower_wrapped("The current node timed out during startup.")
        return "done"

    assert retry_ray_startup(flaky, attempts=3) == "done" and len(calls) == 3
    calls.clear()
    with pytest.raises(RuntimeError, match="Ending simulation"):
        retry_ray_startup(flaky, attempts=2)  # still timing out on its last attempt: raised
    assert len(calls) == 2

    def broken():
        calls.append(1)
        raise flower_wrapped("a strategy's bug")

    calls.clear()
    with pytest.raises(RuntimeError):
        retry_ray_startup(broken, attempts=3)
    assert len(calls) == 1  # any other error: never retried
