import pytest
from hypothesis import given
from hypothesis import strategies as st

from cutlass_nm import Pattern, PatternError


@pytest.mark.parametrize(
    ("text", "n", "m", "v"),
    [("2:4", 2, 4, None), ("2:8", 2, 8, None), ("128:2:8", 2, 8, 128), (" 3:7 ", 3, 7, None), ("64:2:10", 2, 10, 64)],
)
def test_parse_valid(text, n, m, v):
    p = Pattern.parse(text)
    assert (p.n, p.m, p.v) == (n, m, v)
    assert Pattern.parse(str(p)) == p


@pytest.mark.parametrize(
    ("text", "fragment"),
    [("4:4", "N < M"), ("5:4", "N < M"), ("0:4", "N < M"), ("2:200", "maximum"), ("48:2:8", "V in"),
     ("128:3:8", "N must be 2"), ("2-4", "cannot parse"), ("a:b", "cannot parse"), ("1:2:3:4", "cannot parse"),
     ("", "cannot parse"), ("-2:4", "cannot parse"), ("2:\u00b2", "ASCII digits"), ("\u0662:\u0664", "ASCII digits"),
     ("128:2:\uff18", "ASCII digits"), ("2:4\u0301", "cannot parse")],
)
def test_parse_invalid_says_why(text, fragment):
    with pytest.raises(PatternError, match=fragment):
        Pattern.parse(text)


def test_non_string_rejected():
    with pytest.raises(PatternError):
        Pattern.parse(24)  # type: ignore[arg-type]
    with pytest.raises(PatternError):
        Pattern(2.0, 4)  # type: ignore[arg-type]


def test_properties():
    assert Pattern.parse("2:4").is_24 and not Pattern.parse("2:8").is_24
    assert not Pattern.parse("128:2:4").is_24 and Pattern.parse("128:2:4").is_vnm
    assert Pattern.parse("1:4").sparsity == 0.75


@given(st.integers(1, 127), st.integers(2, 128))
def test_nm_roundtrip_or_error(n, m):
    if n < m:
        p = Pattern.parse(f"{n}:{m}")
        assert p.density == n / m
    else:
        with pytest.raises(PatternError):
            Pattern.parse(f"{n}:{m}")


def test_non_ascii_digits_name_the_accepted_syntax():
    """'2:²' used to raise a bare ValueError from int(), '٢:٤' used to parse as 2:4."""
    for text in ("2:\u00b2", "\u0662:\u0664"):
        with pytest.raises(PatternError, match=r"expected 'N:M' \(e\.g\. '2:4'\) or 'V:N:M'.*ASCII digits 0-9"):
            Pattern.parse(text)
