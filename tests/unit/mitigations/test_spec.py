"""The --mitigations syntax, the mitigation: section, and their one-line errors."""

import pytest

from commsim.errors import InputError
from commsim.mitigations.spec import (DEFAULT_MITIGATIONS, AsyncPS, Backup, Compression, LocalSGD, MitigationError,
                                      PowerSGD, check_against, parse_mitigations, parse_section)


def test_default_list_parses_in_order_with_parameters():
    ms = parse_mitigations(DEFAULT_MITIGATIONS)
    assert [m.label for m in ms] == ["fp16", "powersgd:r=4", "backup:b=2", "localsgd:H=8", "async:servers=4", "buckets"]
    assert ms[1].get(PowerSGD).r == 4 and ms[2].get(Backup).b == 2 and ms[3].get(LocalSGD).H == 8
    assert ms[4].get(AsyncPS).servers == 4


def test_parameters_and_combination():
    (m,) = parse_mitigations("bf16+powersgd:r=2:start=0:shapes=resnet50:mem_bw=900GB/s")
    assert m.get(Compression).dtype == "bf16"
    p = m.get(PowerSGD)
    assert (p.r, p.start, p.shapes, p.mem_bw) == (2, 0, "resnet50", 900e9)


def test_reduce_bytes_of_a_16_bit_all_reduce():
    (m,) = parse_mitigations("fp16:reduce_bytes=3.9:mem_bw=10GB/s")
    assert m.get(Compression).reduce_bytes == 3.9 and m.get(Compression).mem_bw == 10e9
    (m,) = parse_mitigations("fp16")
    assert m.get(Compression).reduce_bytes is None  # the bytes it sends (2)


@pytest.mark.parametrize("text, key, words", [
    ("gzip", "gzip", "unknown remedy"),
    ("powersgd:rank=4", "powersgd.rank", "unknown parameter"),
    ("powersgd:r=0", "powersgd.r", "expected a whole number >= 1"),
    ("localsgd:H=0", "localsgd.H", "expected a whole number >= 1"),
    ("localsgd:H=-3", "localsgd.H", "expected a whole number >= 1"),
    ("async:servers=0", "async.servers", "expected a whole number >= 1"),
    ("backup:b=two", "backup.b", "expected a whole number >= 1"),
    ("fp16+bf16", "fp16+bf16", "fp16 cannot be combined with bf16"),
    ("backup:b=1+fp16", "backup:b=1+fp16", "backup cannot be combined with fp16"),
    ("localsgd+powersgd", "localsgd+powersgd", "localsgd cannot be combined with powersgd"),
    ("buckets:x=1", "buckets.x", "takes no parameters"),
    ("fp16:reduce_bytes=0", "fp16.reduce_bytes", "bytes per element the 16-bit all-reduce costs"),
    ("bf16:reduce_bytes=-2", "bf16.reduce_bytes", "not above 0"),
    ("fp16:reduce_bytes=4B", "fp16.reduce_bytes", "expected the bytes per element"),
    ("fp16,,bf16", None, "empty item"),
    ("fp16,fp16", "fp16", "listed twice"),
    ("powersgd:r=4:r=5", "powersgd.r", "expected each parameter once, got r=4 and r=5"),
    ("fp16+powersgd:start=1: start =2", "powersgd.start", "expected each parameter once"),
    # the scenario's plausibility limits: beyond them every step time was inf and the rows NaN
    # (mem_bw=1e-308, kernel_overhead=1e308), or the priced bytes overflowed the kernel's check
    ("fp16:mem_bw=1e-308", "fp16.mem_bw", "expected a rate of at least 1 B/s"),
    ("powersgd:fresh_bw=1e-308 B/s", "powersgd.fresh_bw", "expected a rate of at least 1 B/s"),
    ("async:bandwidth=1e-308", "async.bandwidth", "expected a rate of at least 1 B/s"),
    ("powersgd:kernel_overhead=1e308", "powersgd.kernel_overhead", "expected a time up to 1e+06 s"),
    ("localsgd:subgroup_overhead=1e308", "localsgd.subgroup_overhead", "expected a time up to 1e+06 s"),
    ("async:latency=1e308", "async.latency", "expected a time up to 1e+06 s"),
    ("fp16:reduce_bytes=1e308", "fp16.reduce_bytes", "above 4e+06"),
])
def test_bad_remedies_are_one_line_input_errors_naming_the_key(text, key, words):
    with pytest.raises(MitigationError) as err:
        parse_mitigations(text)
    assert isinstance(err.value, InputError)
    assert err.value.path == key
    assert words in str(err.value) and "\n" not in str(err.value)
    assert str(err.value).startswith(f"--mitigations {text!r}")


def test_b_at_least_n_and_r_above_the_dimension_are_refused():
    (m,) = parse_mitigations("backup:b=4")
    with pytest.raises(MitigationError, match=r"b < n\), got b=4"):
        check_against(m, 4, "--mitigations")
    check_against(m, 5, "--mitigations")
    (p,) = parse_mitigations("powersgd:r=65")
    with pytest.raises(MitigationError, match="smallest compressed gradient dimension"):
        check_against(p, 8, "--mitigations", min_dimension=64)


def test_section_of_a_scenario_file():
    ms = parse_section([{"remedy": "powersgd", "r": 4}, "fp16", {"remedy": "fp16+powersgd"}], "s.yaml")
    assert [m.label for m in ms] == ["powersgd:r=4", "fp16", "fp16+powersgd"]
    with pytest.raises(MitigationError) as err:
        parse_section([{"remedy": "backup", "b": 0}], "s.yaml")
    assert err.value.source == "s.yaml" and err.value.path == "mitigation[0].b"
    with pytest.raises(MitigationError, match="non-empty list"):
        parse_section({"fp16": None}, "s.yaml")


def test_parameters_the_scenario_cannot_take_are_named_by_their_parameter_path():
    # once 'backup:b=2.b' and 'fp16+powersgd:r=4096.r': the label, value included, as a key path
    from commsim.mitigations.spec import MitigationError, check_against, parse_mitigations

    (backup,) = parse_mitigations("backup:b=2")
    with pytest.raises(MitigationError) as err:
        check_against(backup, 2, "--mitigations")
    assert str(err.value).startswith("--mitigations: backup.b: expected fewer backup workers than the 2 workers")
    (psgd,) = parse_mitigations("fp16+powersgd:r=4096")
    with pytest.raises(MitigationError) as err:
        check_against(psgd, 8, "--mitigations", min_dimension=1024)
    assert str(err.value).startswith("--mitigations: powersgd.r: expected a rank no larger than")


@pytest.mark.parametrize("text, first, second", [
    ("powersgd:r=4,powersgd:r=04", "powersgd:r=4", "powersgd:r=04"),
    ("fp16+powersgd,powersgd+fp16", "fp16+powersgd", "powersgd+fp16"),
    ("powersgd:r=4,powersgd: r=4", "powersgd:r=4", "powersgd: r=4"),
])
def test_the_same_run_under_two_labels_is_listed_twice(text, first, second):
    # these were compared by label and ran twice, as two rows of one result
    with pytest.raises(MitigationError) as err:
        parse_mitigations(text)
    assert str(err.value).endswith(f"the same remedy is listed twice ({first!r} and {second!r})")
    assert len(parse_mitigations("powersgd:r=4,powersgd:r=5")) == 2  # different runs stay apart
