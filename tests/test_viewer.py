"""``wuji_jax.viz.viewer``: the self-contained HTML page, its embedded joint table, ``wuji-jax view``, and —
in headless chromium — the page's joint list, click panel and JS forward kinematics against wuji_jax's."""

import html
import json
import re
import shutil
import subprocess
import tempfile
from html.parser import HTMLParser
from importlib.resources import files
from pathlib import Path
from urllib.parse import quote

import jax
import numpy as np
import pytest

import matplotlib.image  # noqa: E402  (the test extra installs it)

import wuji_jax as wj
from wuji_jax.cli import main
from wuji_jax.hand.model import rpy_to_matrix
from wuji_jax.viz.viewer import viewer_data, write_viewer

TOL = 1e-9  # metres: JS float64 FK against wuji_jax float64 FK (conftest enables x64)


def _pose(hand, seed: int) -> np.ndarray:
    """A random pose well inside the limits (every joint away from zero)."""
    lo, hi = np.asarray(hand.lower, np.float64), np.asarray(hand.upper, np.float64)
    return lo + (hi - lo) * np.random.default_rng(seed).uniform(0.15, 0.85, hand.num_joints)


def _embedded(page: str) -> dict:
    m = re.search(r'<script type="application/json" id="wuji-data">(.*?)</script>', page, re.S)
    assert m, "no embedded wuji-data block"
    return json.loads(m.group(1))


def _revolute_names(hand) -> list[str]:
    """The page's joint list: active joints in q order, each coupled joint just before its source."""
    out = []
    for k, name in enumerate(hand.joint_names):
        out += [m for m, (src, _) in zip(hand.mimic_names, hand.mimic_sources) if src == k]
        out.append(name)
    return out


# ------------------------------------------------------------------------------ without a browser


def test_page_is_self_contained(right):
    page = write_viewer(right, wj.named_pose("fist"))
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    low = page.lower()
    for needle in ("http://", "https://", "url(", "@import", "<link", "<iframe", "<img"):
        assert needle not in low, needle
    assert not re.search(r"""\s(src|href)\s*=""", low)
    assert low.count("<script") == 2 and low.count("</script>") == 2  # the JSON block and the code


def test_embedded_json_round_trips_the_joint_table(right, left):
    for hand in (right, left.with_coupling(k_abd=0.1, k_cross=-0.05)):
        d = _embedded(write_viewer(hand))
        assert d["side"] == hand.side and d["name"] == hand.name
        assert [lk["name"] for lk in d["links"]] == list(hand.link_names)
        assert [lk["parent"] for lk in d["links"]] == list(hand.parents)
        assert [lk["joint"] for lk in d["links"]] == list(hand.joint_of_link)
        kinds = {0: "fixed", 1: "active", 2: "coupled"}
        assert [lk["kind"] for lk in d["links"][1:]] == [kinds[k] for k in hand.kinds[1:]]
        for key, leaf in (("xyz", hand.origin_xyz), ("rot", hand.origin_rot), ("axis", hand.axis)):
            np.testing.assert_array_equal(np.array([lk[key] for lk in d["links"]]), np.asarray(leaf, np.float64))
        for lk, rot in zip(d["links"], np.asarray(hand.origin_rot, np.float64)):
            np.testing.assert_allclose(rpy_to_matrix(np.array(lk["rpy"])), rot, atol=1e-12)
        assert [j["name"] for j in d["joints"]] == list(hand.joint_names)
        np.testing.assert_array_equal([j["lower"] for j in d["joints"]], np.asarray(hand.lower, np.float64))
        np.testing.assert_array_equal([j["upper"] for j in d["joints"]], np.asarray(hand.upper, np.float64))
        assert [hand.link_names[j["link"]] for j in d["joints"]] == [
            hand.link_names[hand.q_index.index(k)] for k in range(hand.num_joints)]
        (c,) = d["couplings"]
        assert c["name"] == "thumb_cmc_rot" and hand.link_names[c["link"]] == "thumb_proximal_rot"
        assert (c["source"], c["secondary"]) == hand.mimic_sources[0]
        np.testing.assert_array_equal(c["k"], np.asarray(hand.coupling[0], np.float64))
        assert (c["offset"], c["lower"], c["upper"]) == tuple(
            float(x) for x in (hand.coupling_offset[0], hand.mimic_lower[0], hand.mimic_upper[0]))
        assert [hand.link_names[k] for k in d["keypoint_links"]] == list(wj.landmarks.KEYPOINT_LINKS)
        assert d["frames"] == [[0.0] * 20]
        assert set(d["poses"]) == set(wj.POSES)


def test_float32_model_keeps_its_decimals(right):
    hand32 = right.astype(np.float32)
    d = viewer_data(hand32)
    assert d["links"][1]["xyz"] == [0.0329, 0.0355, -0.0241]  # the URDF's numbers, not 0.03290000185...
    assert d["couplings"][0]["k"] == [0.22, 0.0, 0.0]
    np.testing.assert_array_equal(np.array([lk["rot"] for lk in d["links"]], np.float32), hand32.origin_rot)
    np.testing.assert_array_equal(np.array([j["lower"] for j in d["joints"]], np.float32), hand32.lower)


def test_sequences_landmarks_and_escaping(right, tmp_path):
    frames = np.stack([_pose(right, s) for s in range(3)])
    lm = np.array(wj.forward_keypoints(right, frames[0]))
    lm[4] = np.nan  # a missing landmark
    out = tmp_path / "a" / "b" / "v.html"
    title = "</script><script>alert(1)</script> & co"
    page = write_viewer(right, frames, out, landmarks=lm, title=title)
    assert out.read_text(encoding="utf-8") == page
    assert page.lower().count("</script>") == 2
    d = _embedded(page)
    assert d["title"] == title and "&lt;/script&gt;" in page
    np.testing.assert_array_equal(d["frames"], frames)
    assert len(d["landmarks"]) == 3 and d["landmarks"][2][4] == [None, None, None]
    np.testing.assert_array_equal(d["landmarks"][1][:4], lm[:4])
    assert len(viewer_data(right, frames[0], landmarks=np.stack([lm] * 5))["frames"]) == 5  # pose held


@pytest.mark.parametrize("q, lm, match", [
    (np.zeros(19), None, "shape"),
    (np.zeros((0, 20)), None, "shape"),
    (np.full(20, np.nan), None, "NaN"),
    ("open", None, "numeric"),
    (np.zeros((3, 20)), np.zeros((21, 2)), "landmarks must have shape"),
    (np.zeros((3, 20)), np.zeros((2, 21, 3)), "3 frames but landmarks have 2"),
])
def test_bad_input(right, q, lm, match):
    with pytest.raises(ValueError, match=match):
        write_viewer(right, q, landmarks=lm)


# ------------------------------------------------------------------------------------------ the CLI


def test_cli_view(tmp_path, monkeypatch, capsys, right):
    monkeypatch.chdir(tmp_path)
    assert main(["view"]) == 0
    default = Path("wuji_out", "hand_view.html")
    assert str(default) in capsys.readouterr().out
    assert _embedded(default.read_text(encoding="utf-8"))["frames"] == [[0.0] * 20]

    assert main(["view", "fist", "--side", "left", "-o", "fist"]) == 0
    d = _embedded(Path("fist.html").read_text(encoding="utf-8"))
    assert d["side"] == "left" and d["frames"] == [wj.named_pose("fist").tolist()]

    q = _pose(right, 1)
    assert main(["view", ",".join(map(repr, q.tolist())), "-o", "q.html"]) == 0
    assert _embedded(Path("q.html").read_text(encoding="utf-8"))["frames"] == [q.tolist()]
    np.save("seq.npy", np.stack([q, q / 2]))
    assert main(["view", "seq.npy", "-o", "seq.html"]) == 0
    assert len(_embedded(Path("seq.html").read_text(encoding="utf-8"))["frames"]) == 2
    capsys.readouterr()

    for argv, msg in ((["view", "fisst"], "unknown pose 'fisst'"),
                      (["view", "0,0,0"], "expected 20 values"),
                      (["view", ",".join(["3"] * 20)], "outside its limits")):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("wuji-jax: error: ") and msg in err and "\n" not in err


# ------------------------------------------------------------------------------ headless chromium


def _chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        pytest.fail("chromium is not installed; the viewer tests need it: apt-get install chromium")
    return exe


def _browse(url: str, *mode: str) -> str:
    """Run headless chromium on ``url`` with ``mode`` (``--dump-dom`` or ``--screenshot=..``)."""
    with tempfile.TemporaryDirectory(prefix="wuji-chromium-") as profile:
        cmd = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               "--hide-scrollbars", f"--user-data-dir={profile}", "--virtual-time-budget=5000", *mode, url]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout


class _Dom(HTMLParser):
    """The parts of the dumped DOM the tests read: body attributes, the joint list, the panel, <pre>s."""

    def __init__(self, text: str):
        super().__init__()
        self.body: dict = {}
        self.joints: list[str] = []
        self.fields: dict[str, dict] = {}
        self.pre: dict[str, str] = {}
        self.h2: list[str] = []
        self.text: dict[str, str] = {}  # the text of <title> and <h1>
        self._open: list = []  # (tag, sink) of elements whose text is collected
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "body":
            self.body = a
        elif tag == "li" and "data-joint" in a:
            self.joints.append(a["data-joint"])
        elif tag == "tr" and "data-field" in a:
            self._field = self.fields[a["data-field"]] = dict(value=a.get("data-value"), text="")
        elif tag == "td" and getattr(self, "_field", None) is not None:
            self._open.append(("td", self._field))
        elif tag == "pre" and "id" in a:
            self.pre[a["id"]] = ""
            self._open.append(("pre", a["id"]))
        elif tag == "h2":
            self.h2.append("")
            self._open.append(("h2", None))
        elif tag in ("title", "h1"):
            self.text[tag] = ""
            self._open.append((tag, tag))

    def handle_endtag(self, tag):
        if tag == "tr":
            self._field = None
        if self._open and self._open[-1][0] == tag:
            self._open.pop()

    def handle_data(self, data):
        if not self._open:
            return
        tag, sink = self._open[-1]
        if tag == "td":
            sink["text"] += data
        elif tag == "pre":
            self.pre[sink] += data
        elif tag in ("title", "h1"):
            self.text[tag] += data
        else:
            self.h2[-1] += data


def _page(hand, tmp_path, q=None, hash_: str = "", **kw) -> _Dom:
    path = tmp_path / f"view_{hand.side}.html"
    write_viewer(hand, q, path, **kw)
    dom = _Dom(_browse(path.as_uri() + hash_, "--dump-dom"))
    assert dom.body.get("data-ready") == "1", "the page did not finish loading"
    assert "data-error" not in dom.body, dom.body["data-error"]
    assert dom.joints == _revolute_names(hand)
    return dom


def _link_frames(hand, q):
    """``forward_kinematics`` run op by op: ~0.1 s a call once warm, against ~2.5 s to compile each
    input shape in float64 on a 2-core CPU."""
    with jax.disable_jit():
        return wj.forward_kinematics(hand, q)


def _check_fk(hand, dom: _Dom, q, frames=None):
    kp = np.array(json.loads(dom.pre["keypoints-json"]))
    np.testing.assert_allclose(kp, np.asarray(wj.forward_keypoints(hand, q)), rtol=0, atol=TOL)
    links = np.array(json.loads(dom.pre["links-json"]))
    frames = _link_frames(hand, q) if frames is None else frames
    np.testing.assert_allclose(links, np.asarray(frames.positions), rtol=0, atol=TOL)


def _check_angle_field(dom: _Dom, field: str, radians: float):
    f = dom.fields[field]
    assert float(f["value"]) == pytest.approx(np.rad2deg(radians), abs=1e-9)
    assert f"{np.rad2deg(radians):.2f}°" in f["text"]


def test_browser_right_select_and_pose(right, tmp_path):
    """``#select=..&q=..``: the joint list, the panel (links, axes, limits, angle) and JS FK."""
    q = _pose(right, 7)
    dom = _page(right, tmp_path, wj.named_pose("fist"), "#select=index_finger_mcp_abd&q=" + ",".join(map(repr, q.tolist())))
    assert dom.body["data-selected"] == "index_finger_mcp_abd" and dom.h2 == ["index_finger_mcp_abd"]
    k = right.joint_index("index_finger_mcp_abd")
    assert dom.fields["parent"]["text"] == "index_finger_proximal_abd"
    assert dom.fields["child"]["text"] == "index_finger_proximal"
    _check_angle_field(dom, "lower_deg", float(right.lower[k]))
    _check_angle_field(dom, "upper_deg", float(right.upper[k]))
    _check_angle_field(dom, "angle_deg", q[k])
    link = right.link_index("index_finger_proximal")
    frames = _link_frames(right, q)
    axis = np.asarray(right.axis[link])
    np.testing.assert_allclose(json.loads(dom.fields["axis_joint"]["value"]), axis, atol=1e-15)
    np.testing.assert_allclose(json.loads(dom.fields["axis_parent"]["value"]),
                               np.asarray(right.origin_rot[link]) @ axis, atol=1e-12)
    np.testing.assert_allclose(json.loads(dom.fields["axis_wrist"]["value"]),
                               np.asarray(frames.rotations[link]) @ axis, atol=1e-12)
    _check_fk(right, dom, q, frames)


def test_browser_left_coupled_joint(left, tmp_path):
    """The coupled thumb joint's panel (law, gains, angle) and JS FK with a full screw-home law."""
    hand = left.with_coupling(k_abd=0.12, k_cross=-0.3)
    q = _pose(hand, 11)
    dom = _page(hand, tmp_path, hash_="#q=" + json.dumps(q.tolist()) + "&select=thumb_cmc_rot")
    assert dom.h2 == ["thumb_cmc_rot"] and dom.fields["kind"]["value"] == "coupled"
    assert dom.fields["parent"]["text"] == "thumb_metacarpal"
    assert json.loads(dom.fields["coupling_gains"]["value"]) == dict(k=[0.22, 0.12, -0.3], offset=0.0)
    assert "K_FLEX·θ_flex + K_ABD·θ_abd + K_CROSS·θ_flex·θ_abd" in dom.fields["coupling_law"]["text"]
    assert dom.fields["coupling_flex"]["value"] == "thumb_cmc_flex"
    assert dom.fields["coupling_abd"]["value"] == "thumb_cmc_abd"
    _check_angle_field(dom, "lower_deg", float(hand.mimic_lower[0]))
    _check_angle_field(dom, "upper_deg", float(hand.mimic_upper[0]))
    _check_angle_field(dom, "angle_deg", float(wj.coupled_angles(hand, q)[0]))
    _check_fk(hand, dom, q)


def test_browser_sequence_frame_and_click(right, tmp_path):
    """A (T, 20) sequence at ``#frame=2``, and a click dispatched on a joint's dot selects it."""
    frames = np.stack([_pose(right, s) for s in (1, 2, 3)])
    dom = _page(right, tmp_path, frames, "#frame=2&click=middle_finger_dip")
    assert dom.body["data-selected"] == "middle_finger_dip"
    _check_angle_field(dom, "angle_deg", frames[2, right.joint_index("middle_finger_dip")])
    _check_fk(right, dom, frames[2])


def test_browser_screenshot(right, tmp_path):
    """The canvas draws: a screenshot that is not blank and shows the finger colours."""
    path = tmp_path / "v.html"
    write_viewer(right, wj.named_pose("pinch"), path)
    shot = tmp_path / "shot.png"
    _browse(path.as_uri(), f"--screenshot={shot}", "--window-size=900,600")
    img = matplotlib.image.imread(shot)[..., :3]
    assert img.shape[:2] == (600, 900)
    canvas = img[:, : 900 - 370]
    assert canvas.std() > 0.02
    for hexcolor in ("#c2255c", "#1971c2", "#2f9e44", "#e8590c", "#7048e8"):  # the five fingers
        rgb = np.array([int(hexcolor[i:i + 2], 16) / 255 for i in (1, 3, 5)])
        assert (np.abs(canvas - rgb).max(-1) < 0.08).sum() > 40, hexcolor


# ------------------------------------------------------------------- hostile names (script injection)

_PWN = "document.body.dataset.pwned=1"  # what an injected script or handler would do; the tests look for it
HOSTILE = (
    "__DATA__", "__SCRIPT__", "__TITLE__",
    f"</script><script>{_PWN}</script>",
    f"<img src=x onerror={_PWN}>",
    f"<svg onload={_PWN}>",
    f"<!--<script>{_PWN}//",
    "\"'&amp;\u2028\u2029",
)
HOSTILE_TITLE = "T|" + "|".join(HOSTILE)
HOSTILE_FILE = f"<img src=x onerror={_PWN}>__DATA__.npy"  # the example, as an angle file's name


def _hostile_hand(hand):
    """``hand`` with a hostile robot name and every link and joint name carrying a payload (names unique)."""
    pay = lambda k, s: s + HOSTILE[k % len(HOSTILE)] if s else s
    joints = {old: pay(k, old) for k, old in enumerate(hand.joint_of_link)}
    return hand.replace(
        name="R" + "".join(HOSTILE),
        link_names=tuple(pay(k + 3, s) for k, s in enumerate(hand.link_names)),
        joint_of_link=tuple(joints[s] for s in hand.joint_of_link),
        joint_names=tuple(joints[s] for s in hand.joint_names),
    )


class _Tags(HTMLParser):
    """The page's element structure (tag and attribute names) and the text of <title> and <h1>."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.tags: list = []
        self.text: dict[str, str] = {}
        self._in = None
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, tuple(sorted(k for k, _ in attrs))))
        self._in = tag if tag in ("title", "h1") else None
        if self._in:
            self.text[tag] = ""

    def handle_endtag(self, tag):
        self._in = None

    def handle_data(self, data):
        if self._in:
            self.text[self._in] += data


def _assert_inert(page: str, title: str, reference: str):
    """``page`` has the element structure of ``reference`` (a page with tame names): no tag, attribute,
    comment or script smuggled in; <title> and <h1> show ``title`` exactly; the JSON block holds no
    ``<``, ``>``, ``&``, U+2028 or U+2029 (written as ``\\uXXXX``)."""
    low = page.lower()
    assert low.count("<script") == 2 and low.count("</script>") == 2
    for needle in ("<img", "<svg", "<!--"):
        assert needle not in low, needle
    got, ref = _Tags(page), _Tags(reference)
    assert got.tags == ref.tags
    assert got.text == {"title": title, "h1": title}
    m = re.search(r'<script type="application/json" id="wuji-data">(.*?)</script>', page, re.S)
    assert not set(m.group(1)) & set("<>&\u2028\u2029")


def test_hostile_names_are_escaped(right):
    """Titles, robot, link and joint names with placeholders and markup: the page's structure is the
    template's, the text reads back exactly, and the embedded JSON parses back to the same strings."""
    hand = _hostile_hand(right)
    reference = write_viewer(right, title="T")
    for title in (HOSTILE_TITLE, None, *HOSTILE):
        page = write_viewer(hand, title=title)
        d = _embedded(page)
        want = title if title is not None else f"Right hand — kinematic tree ({hand.name})"
        assert d["title"] == want and d["name"] == hand.name
        assert [lk["name"] for lk in d["links"]] == list(hand.link_names)
        assert [lk["joint"] for lk in d["links"]] == list(hand.joint_of_link)
        assert [j["name"] for j in d["joints"]] == list(hand.joint_names)
        assert [c["name"] for c in d["couplings"]] == list(hand.mimic_names)
        _assert_inert(page, want, reference)
    assert viewer_data(hand, title=HOSTILE_TITLE)["title"] == HOSTILE_TITLE  # the data is not escaped twice
    script = files("wuji_jax.viz").joinpath("viewer.html").read_text(encoding="utf-8").rsplit("<script>", 1)[1]
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "Function("):
        assert sink not in script, sink  # names reach the DOM only as textContent, dataset or properties


def test_cli_view_hostile_file_name(tmp_path, monkeypatch, capsys, right):
    """``wuji-jax view "<img src=x onerror=...>__DATA__.npy"``: the name is shown, never run."""
    monkeypatch.chdir(tmp_path)
    np.save(HOSTILE_FILE, np.zeros((2, 20)))
    assert main(["view", HOSTILE_FILE, "-o", "h.html"]) == 0
    capsys.readouterr()
    page = Path("h.html").read_text(encoding="utf-8")
    title = f"WG110v12 right hand — angles from {HOSTILE_FILE}"
    assert _embedded(page)["title"] == title
    _assert_inert(page, title, write_viewer(right, title="T"))


def test_browser_hostile_names_run_no_script(right, tmp_path, monkeypatch, capsys):
    """In chromium, hostile names (an angle file's name through the CLI; title, robot, links, joints) run
    nothing (no ``data-pwned``) while the viewer's own script runs: it lists the joints, fills the panel
    of a hostile joint selected through the URL hash, and the names show as text."""
    monkeypatch.chdir(tmp_path)
    np.save(HOSTILE_FILE, np.zeros((1, 20)))
    assert main(["view", HOSTILE_FILE, "-o", "cli.html"]) == 0
    capsys.readouterr()
    dom = _Dom(_browse((tmp_path / "cli.html").as_uri(), "--dump-dom"))
    assert "data-pwned" not in dom.body and dom.body.get("data-ready") == "1"
    assert dom.joints == _revolute_names(right)
    title = f"WG110v12 right hand — angles from {HOSTILE_FILE}"
    assert dom.text == {"title": title, "h1": title}

    hand = _hostile_hand(right)
    name = next(n for n in hand.joint_names if "<img" in n)  # no "&": the hash is split at "&"
    dom = _page(hand, tmp_path, hash_="#select=" + quote(name, safe=""), title=HOSTILE_TITLE)
    assert "data-pwned" not in dom.body
    assert dom.body["data-selected"] == name and dom.h2 == [name]
    link = hand.link_names[hand.joint_of_link.index(name)]
    assert dom.fields["child"]["text"] == dom.fields["child"]["value"] == link
    assert dom.fields["parent"]["text"] == hand.link_names[hand.parents[hand.link_names.index(link)]]
    assert dom.text == {"title": HOSTILE_TITLE, "h1": HOSTILE_TITLE}
    assert len(json.loads(dom.pre["keypoints-json"])) == 21
