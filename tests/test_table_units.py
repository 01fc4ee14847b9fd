"""Tables print accuracies in percent, the workbook's one unit (the report's), and other values as
they are."""
import pandas as pd
import pytest

from workbook.tables import to_markdown


def _table(mean, std, n=3):
    return pd.DataFrame([{"dataset": "fmnist", "protocol": "dirichlet", "level": 0.3, "n_clients": 100,
                          "method": "fedavg", "mean": mean, "std": std, "n_seeds": n, "n_failed": 0}])


def test_accuracies_print_in_percent_by_hand():
    md = to_markdown(_table(0.8731, 0.0058))
    assert md.splitlines()[0] == "**fmnist** (%)"
    assert "| FedAvg | 87.31 ± 0.58 |" in md
    assert "| FedAvg | 87.31 |" in to_markdown(_table(0.8731, 0.0, n=1))  # one seed: no ± 0.00


def test_other_values_print_as_they_are():
    md = to_markdown(_table(2.2, 0.4), percent=False)  # e.g. PSI-PFL's client parity CP
    assert md.splitlines()[0] == "**fmnist**" and "| FedAvg | 2.20 ± 0.40 |" in md


def test_percent_must_be_a_bool():
    with pytest.raises(ValueError, match="percent"):
        to_markdown(_table(0.5, 0.1), percent="yes")
