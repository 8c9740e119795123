import csv
import io
from importlib import resources

import numpy as np
import pytest

from wanreduce.host.topology import load_topology, parse_topology_csv, synthetic_regions
from wanreduce.spec.errors import WanreduceError


def _embedded_rows():
    text = resources.files("wanreduce.host.data").joinpath("nine_city.csv").read_text()
    return list(csv.DictReader(io.StringIO(text)))


def test_nine_city_default_is_half_the_rtt_of_every_pair():
    topo = load_topology()
    assert topo.sites == ("AMS", "BAR", "FRA", "LAX", "LON", "NYC", "SEO", "SIN", "TYO")
    rows = _embedded_rows()
    assert len(rows) == 36
    for row in rows:
        i, j = topo.index(row["City1"]), topo.index(row["City2"])
        # no detour beats a direct pair on this mesh, so the one-way delay is exactly RTT / 2
        assert topo.one_way_s[i, j] == pytest.approx(float(row["Latency"]) / 2e3)
        assert topo.one_way_s[j, i] == topo.one_way_s[i, j]
    assert np.all(np.diag(topo.one_way_s) == 0)
    # figures quoted by the source's README
    assert topo.one_way_s[topo.index("NYC"), topo.index("LON")] == pytest.approx(0.07452 / 2)
    assert not topo.links_limited


def test_shortest_path_routes_around_a_triangle_violation():
    text = "City1,City2,Latency\nA,B,10\nB,C,10\nA,C,100\n"
    topo = parse_topology_csv(text)
    a, b, c = (topo.index(x) for x in "ABC")
    assert topo.one_way_s[a, c] == pytest.approx(0.010)  # (10 + 10) / 2 ms
    ends = [topo.link_ends[e] for e in topo.paths[a][c]]
    assert ends == [("A", "B"), ("B", "C")]
    d = topo.one_way_s
    via = d[:, :, None] + d[None, :, :]  # via[i, k, j] = d(i, k) + d(k, j)
    assert np.all(d[:, None, :] <= via + 1e-12)


def test_bandwidth_column_and_link_default():
    text = "City1,City2,Latency,Bandwidth\nA,B,10,8\nA,C,20,\nB,C,30,16\n"
    topo = parse_topology_csv(text, link_gbps=4)
    caps = {topo.link_ends[e]: c for e, c in enumerate(topo.link_cap_Bps)}
    assert caps[("A", "B")] == caps[("B", "A")] == 1e9  # 8 Gbit/s
    assert caps[("A", "C")] == 0.5e9  # the --link-gbps default for an empty cell
    assert caps[("B", "C")] == 2e9
    assert topo.links_limited
    assert not parse_topology_csv("City1,City2,Latency\nA,B,1\n").links_limited


def test_nine_city_private_merges_switches_and_sums_edges():
    topo = load_topology("nine-city-private")
    assert len(topo.sites) == 9 and topo.links_limited
    seo, bar = topo.index("SEO"), topo.index("BAR")
    hops = [topo.link_ends[e] for e in topo.paths[seo][bar]]
    assert hops == [("SEO", "TYO"), ("TYO", "LAX"), ("LAX", "NYC"), ("NYC", "BAR")]
    assert topo.one_way_s[seo, bar] == pytest.approx((4.50 + 57.62 + 25.72 + 55.32) / 2e3)
    # NYC has four 10 Gbit/s switches, AMS one
    assert topo.site_cap_Bps[topo.index("NYC")] == pytest.approx(40e9 / 8)
    assert topo.site_cap_Bps[topo.index("AMS")] == pytest.approx(10e9 / 8)
    assert np.all(np.isclose(topo.link_cap_Bps, 10e9 / 8))


def test_sites_option_orders_and_restricts():
    topo = load_topology("nine-city", sites=["TYO", "NYC", "LON"])
    assert topo.sites == ("TYO", "NYC", "LON")
    assert topo.one_way_s[1, 2] == pytest.approx(0.07452 / 2)


def test_synthetic_regions_is_seeded():
    a, b = synthetic_regions(20, regions=4, seed=3), synthetic_regions(20, regions=4, seed=3)
    assert np.array_equal(a.one_way_s, b.one_way_s)
    assert not np.array_equal(a.one_way_s, synthetic_regions(20, regions=4, seed=4).one_way_s)
    # same-region sites are closer than the farthest pair by far
    assert a.one_way_s[0, 4] < 0.2 * a.one_way_s.max()


BAD = [
    ("City1,City2,Latency\nA,B,10\nA,C,10\n", "pair B-C is missing"),
    ("City1,City2,Latency\nA,B,0\n", "must be positive"),
    ("City1,City2,Latency\nA,B,-3\n", "must be positive"),
    ("City1,City2,Latency\nA,B,ten\n", "is not a number"),
    ("City1,City2,Latency\nA,B,10\nB,A,12\n", "appears twice with different values"),
    ("City1,City2,Latency\nA,A,10\n", "to itself"),
    ("Src,Dst,Delay\nA,B,10\n", "header must name"),
    ("", "is empty"),
    ("City1,City2,Latency\n", "has no links"),
    ("Device1,Device2,Latency,Bandwidth\nA1,B1,10,10\nC1,D1,10,10\n", "disconnected"),
    ("Device1,Device2,Latency,Bandwidth\nA1,B1,10,0\n", "bandwidth of A1-B1 must be positive"),
    ("City1,City2,Latency,Bandwidth\nA,B,10,-1\n", "must be positive"),
]


@pytest.mark.parametrize("text,message", BAD)
def test_bad_topology_is_one_clear_error(text, message):
    with pytest.raises(WanreduceError, match=message) as info:
        parse_topology_csv(text, source="t.csv")
    assert "\n" not in str(info.value)


def test_duplicate_with_same_values_is_accepted():
    topo = parse_topology_csv("City1,City2,Latency\nA,B,10\nB,A,10\n")
    assert topo.one_way_s[0, 1] == pytest.approx(0.005)


def test_unknown_city_and_unknown_topology():
    with pytest.raises(WanreduceError, match="unknown city 'PAR'"):
        load_topology("nine-city", sites=["AMS", "PAR"])
    with pytest.raises(WanreduceError, match="neither nine-city"):
        load_topology("no-such-topology")
    with pytest.raises(WanreduceError, match="at least 2 sites"):
        load_topology("nine-city", sites=["AMS"])


def test_csv_with_a_utf8_byte_order_mark(tmp_path):
    text = "City1,City2,Latency\nA,B,10\nA,C,20\nB,C,30\n"
    path = tmp_path / "bom.csv"
    path.write_bytes(b"\xef\xbb\xbf" + text.encode())
    topo = load_topology(str(path))
    assert topo.sites == ("A", "B", "C")
    assert topo.one_way_s[topo.index("A"), topo.index("C")] == pytest.approx(0.010)
    # the same text, already decoded with its mark (as a caller might pass it), reads the same way
    assert parse_topology_csv("\ufeff" + text).sites == ("A", "B", "C")


@pytest.mark.parametrize(
    "content,message",
    [
        (b"City1,City2,Latency\nZ\xfcrich,B,10\n", "is not UTF-8 text (byte 21 is 0xfc)"),
    ],
)
def test_unreadable_csv_is_one_line_in_our_words(tmp_path, content, message):
    path = tmp_path / "t.csv"
    path.write_bytes(content)
    with pytest.raises(WanreduceError) as info:
        load_topology(str(path))
    text = str(info.value)
    assert message in text and "codec" not in text and "\n" not in text


def test_topology_path_that_is_a_directory(tmp_path):
    with pytest.raises(WanreduceError) as info:
        load_topology(str(tmp_path))
    assert "cannot read topology file" in str(info.value) and "[Errno" not in str(info.value)
