"""Limits by geography: ``Rule(key="country")`` counts per country, ``Rule(countries=[...])``
applies to some countries only; the country comes from the limiter's ``country=`` sources, a
CDN's header (believed only from trusted proxies) or a MaxMind DB (built here by
`tests.mmdb`, read by the real ``maxminddb``). Real Starlette apps, memory and Redis."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import maxminddb
import pytest
from fastapi import Depends, FastAPI

from asgi_ratelimit import (
    APIKey,
    ClientIP,
    ConfigurationError,
    CountryHeader,
    GeoIPCountry,
    Limit,
    MemoryBackend,
    RateLimiter,
    Rule,
)
from asgi_ratelimit.backends import Backend
from tests.conftest import FakeClock
from tests.mmdb import write_country_db

from .conftest import client, make_app

ALIGNED = 1_800_000_000.0  # a multiple of 60: every minute window starts now
SEARCH = "/search"
PROXY = "10.0.0.1"
GERMANS = ("203.0.113.7", "203.0.113.8")
BRAZILIAN = "198.51.100.9"
NOWHERE = ("192.0.2.1", "192.0.2.2")  # in no network of the database
NETWORKS = {"203.0.113.0/24": "DE", "198.51.100.0/24": "BR", "2001:db8::/32": "FR"}


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(ALIGNED)


@pytest.fixture
def geo_db(tmp_path: Path) -> Path:
    return write_country_db(tmp_path / "countries.mmdb", NETWORKS)


def fixed(rate: str) -> Limit:
    return Limit(rate, algorithm="fixed_window")


async def codes(peer: str, limiter: RateLimiter, count: int, **headers: str) -> list[int]:
    async with client(make_app(limiter), peer=peer) as http:
        return [(await http.get(SEARCH, headers=headers)).status_code for _ in range(count)]


def cloudflare() -> CountryHeader:
    return CountryHeader.cloudflare(trusted_proxies=["10.0.0.0/8"])


# -- the test database -------------------------------------------------------------------


def test_the_test_database_is_a_maxmind_db(geo_db: Path) -> None:
    with maxminddb.open_database(geo_db) as reader:
        assert reader.metadata().ip_version == 6
        assert reader.get(GERMANS[0]) == {"country": {"iso_code": "DE"}}
        assert reader.get(BRAZILIAN) == {"country": {"iso_code": "BR"}}
        assert reader.get("2001:db8:1::5") == {"country": {"iso_code": "FR"}}
        assert reader.get(NOWHERE[0]) is None
        assert reader.get_with_prefix_len(GERMANS[0]) == ({"country": {"iso_code": "DE"}}, 24)


def test_an_ipv6_client_in_an_ipv4_database_has_no_country(tmp_path: Path) -> None:
    path = write_country_db(tmp_path / "v4.mmdb", {"203.0.113.0/24": "DE"}, ip_version=4)
    with maxminddb.open_database(path) as reader:
        assert reader.metadata().ip_version == 4
    source = GeoIPCountry(path)
    assert source({"client": (GERMANS[0], 1)}) == "DE"
    assert source({"client": ("2001:db8::1", 1)}) is None  # the reader refuses: unknown
    assert source({"client": ("::ffff:203.0.113.9", 1)}) == "DE"  # IPv4-mapped is IPv4


# -- per-country budgets -----------------------------------------------------------------


async def test_clients_of_one_country_share_a_budget_and_another_has_its_own(
    backend: Backend, geo_db: Path
) -> None:
    limiter = RateLimiter(
        backend=backend,
        country=GeoIPCountry(geo_db),
        rules=[Rule(SEARCH, limits=fixed("2/minute"), key="country")],
    )
    assert await codes(GERMANS[0], limiter, 1) == [200]
    assert await codes(GERMANS[1], limiter, 2) == [200, 429]  # the other German's 2nd
    assert await codes(BRAZILIAN, limiter, 3) == [200, 200, 429]
    assert await codes("2001:db8:77::1", limiter, 3) == [200, 200, 429]  # FR, over IPv6
    await limiter.reset("country:DE")  # a country's budgets, back in full
    assert await codes(GERMANS[1], limiter, 3) == [200, 200, 429]
    assert await codes(BRAZILIAN, limiter, 1) == [429]


async def test_an_unknown_country_is_one_budget_of_its_own(
    limiter_for: Callable[..., RateLimiter], geo_db: Path
) -> None:
    limiter = limiter_for(
        country=GeoIPCountry(geo_db), rules=[Rule(SEARCH, limits=fixed("2/minute"), key="country")]
    )
    assert await codes(NOWHERE[0], limiter, 1) == [200]
    assert await codes(NOWHERE[1], limiter, 2) == [200, 429]  # country:unknown, shared
    assert await codes(GERMANS[0], limiter, 2) == [200, 200]


async def test_a_user_keeps_their_own_budget_in_every_country(
    limiter_for: Callable[..., RateLimiter], geo_db: Path
) -> None:
    # The country is where a request comes from, not whose budget it spends.
    limiter = limiter_for(
        identify=[APIKey(keys={"k-1": None})],
        country=GeoIPCountry(geo_db),
        rules=[
            Rule(SEARCH, limits=fixed("3/minute"), name="per-user"),
            Rule(SEARCH, limits=fixed("10/minute"), key="country", name="per-country"),
        ],
    )
    key = {"x-api-key": "k-1"}
    assert await codes(GERMANS[0], limiter, 2, **key) == [200, 200]
    assert await codes(BRAZILIAN, limiter, 2, **key) == [200, 429]  # the user's 3rd, then none
    assert await codes(BRAZILIAN, limiter, 1) == [200]  # the IP's own identity


# -- countries=[...] ---------------------------------------------------------------------


async def test_a_rule_applies_only_to_its_countries(
    limiter_for: Callable[..., RateLimiter], geo_db: Path
) -> None:
    limiter = limiter_for(
        country=GeoIPCountry(geo_db),
        rules=[
            Rule(SEARCH, limits=fixed("1/minute"), countries=["br"], key="ip", name="br"),
            Rule(SEARCH, limits=fixed("3/minute"), key="ip", name="everyone"),
        ],
    )
    assert limiter.rules[0].countries == frozenset({"BR"})
    assert await codes(BRAZILIAN, limiter, 3) == [200, 429, 429]
    assert await codes(GERMANS[0], limiter, 4) == [200, 200, 200, 429]
    assert await codes(NOWHERE[0], limiter, 4) == [200, 200, 200, 429]  # unknown: never in it
    async with client(make_app(limiter), peer=GERMANS[1]) as http:
        response = await http.get(SEARCH)
        assert response.headers["ratelimit-policy"] == '"everyone";q=3;w=60'


async def test_a_countries_rule_matches_by_path_so_the_default_limits_do_not_step_in(
    limiter_for: Callable[..., RateLimiter], geo_db: Path
) -> None:
    limiter = limiter_for(
        country=GeoIPCountry(geo_db),
        rules=[Rule(SEARCH, limits=fixed("1/minute"), countries=["BR"], key="ip")],
        default_limits=fixed("2/minute"),
    )
    assert await codes(BRAZILIAN, limiter, 2) == [200, 429]
    assert await codes(GERMANS[0], limiter, 4) == [200] * 4  # matched, then left out


async def test_countries_combine_with_a_per_country_key(
    limiter_for: Callable[..., RateLimiter], geo_db: Path
) -> None:
    limiter = limiter_for(
        country=GeoIPCountry(geo_db),
        rules=[Rule(SEARCH, limits=fixed("2/minute"), countries=["DE", "FR"], key="country")],
    )
    assert await codes(GERMANS[0], limiter, 1) == [200]
    assert await codes(GERMANS[1], limiter, 2) == [200, 429]
    assert await codes("2001:db8::9", limiter, 3) == [200, 200, 429]
    assert await codes(BRAZILIAN, limiter, 5) == [200] * 5  # not limited at all


async def test_an_override_of_a_country_rule_applies_in_its_countries_only(
    limiter_for: Callable[..., RateLimiter], geo_db: Path
) -> None:
    limiter = limiter_for(
        country=GeoIPCountry(geo_db),
        rules=[Rule(SEARCH, limits=fixed("1/minute"), countries=["BR"], key="ip", name="br")],
    )
    await limiter.overrides.set(f"ip:{BRAZILIAN}", fixed("3/minute"), policy="br")
    await limiter.overrides.set(f"ip:{GERMANS[0]}", fixed("1/minute"), policy="br")
    assert await codes(BRAZILIAN, limiter, 4) == [200, 200, 200, 429]
    assert await codes(GERMANS[0], limiter, 3) == [200] * 3  # the rule is not Germany's


# -- the CDN's header --------------------------------------------------------------------


async def test_the_header_is_believed_only_from_a_trusted_proxy(
    limiter_for: Callable[..., RateLimiter],
) -> None:
    limiter = limiter_for(
        identify=[ClientIP(trusted_proxies=["10.0.0.0/8"])],
        country=cloudflare(),
        rules=[Rule(SEARCH, limits=fixed("1/minute"), countries=["BR"], key="global")],
    )
    brazil = {"cf-ipcountry": "BR"}
    # A client straight to the app claims Brazil: it is not believed, nothing limits it.
    assert await codes(GERMANS[0], limiter, 4, **brazil) == [200] * 4
    # Through the proxy, Brazil is believed.
    assert await codes(PROXY, limiter, 2, **brazil) == [200, 429]


async def test_a_spoofed_header_buys_no_budget_of_another_country(
    limiter_for: Callable[..., RateLimiter],
) -> None:
    limiter = limiter_for(
        country=cloudflare(), rules=[Rule(SEARCH, limits=fixed("2/minute"), key="country")]
    )
    spoofed = [(await codes(GERMANS[0], limiter, 1, **{"cf-ipcountry": c}))[0] for c in "ABCD"]
    assert spoofed == [200, 200, 429, 429]  # all one country: unknown


MALFORMED = {
    "empty": [b""],
    "cloudflares-unknown": [b"XX"],
    "one-letter": [b"D"],
    "alpha-3": [b"DEU"],
    "dashes": [b"--"],
    "stars": [b"**"],
    "not-utf-8": [b"1\xff"],
    "not-ascii": [b"\xc3\x9c\xc3\x9c"],
    "10-kb": [b"D" * 10_000],
    "a-list": [b"DE, BR"],
    "two-lines": [b"DE", b"BR"],
}


@pytest.mark.parametrize("values", list(MALFORMED.values()), ids=list(MALFORMED))
async def test_a_malformed_header_is_an_unknown_country_never_a_500(
    limiter_for: Callable[..., RateLimiter], values: list[bytes]
) -> None:
    limiter = limiter_for(
        country=cloudflare(), rules=[Rule(SEARCH, limits=fixed("2/minute"), key="country")]
    )
    headers = [(b"cf-ipcountry", value) for value in values]
    async with client(make_app(limiter), peer=PROXY) as http:
        got = [(await http.get(SEARCH, headers=headers)).status_code for _ in range(3)]
        assert got == [200, 200, 429]
        # The unknown budget is spent: the malformed header got nothing of its own.
        assert (await http.get(SEARCH)).status_code == 429
        assert (await http.get(SEARCH, headers={"cf-ipcountry": "DE"})).status_code == 200


async def test_tor_is_a_country_code_and_codes_are_upper_cased(
    limiter_for: Callable[..., RateLimiter],
) -> None:
    limiter = limiter_for(
        country=cloudflare(),
        rules=[Rule(SEARCH, limits=fixed("1/minute"), countries=["T1"], key="global")],
    )
    assert await codes(PROXY, limiter, 1, **{"cf-ipcountry": " t1 "}) == [200]
    assert await codes(PROXY, limiter, 1, **{"cf-ipcountry": "T1"}) == [429]
    assert await codes(PROXY, limiter, 2, **{"cf-ipcountry": "DE"}) == [200, 200]


def test_the_cdns_header_names() -> None:
    assert cloudflare().header == "cf-ipcountry"
    assert CountryHeader.cloudfront(trusted_proxies="10.0.0.0/8").header == (
        "cloudfront-viewer-country"
    )
    assert CountryHeader.fastly(trusted_proxies=["10.0.0.0/8"]).header == "fastly-client-country"
    assert CountryHeader.fastly(["10.0.0.0/8"], header="X-Geo").header == "x-geo"
    assert repr(cloudflare()) == "CountryHeader('cf-ipcountry', trusted_proxies=['10.0.0.0/8'])"


@pytest.mark.parametrize(
    "scope",
    [{}, {"client": None}, {"client": ("not an ip", 1)}, {"client": (PROXY, 1), "headers": 7}],
    ids=repr,
)
def test_a_scope_without_a_usable_peer_or_headers_has_no_country(scope: Any) -> None:
    assert cloudflare()(scope) is None


# -- sources in order, GeoIP behind proxies ----------------------------------------------


async def test_geoip_looks_up_the_address_the_limiters_client_ip_resolves(
    limiter_for: Callable[..., RateLimiter], geo_db: Path
) -> None:
    limiter = limiter_for(
        identify=[ClientIP(trusted_proxies=["10.0.0.0/8"])],
        country=GeoIPCountry(geo_db),
        rules=[Rule(SEARCH, limits=fixed("1/minute"), countries=["BR"], key="global")],
    )
    brazilian = {"x-forwarded-for": BRAZILIAN}
    assert await codes(GERMANS[0], limiter, 3, **brazilian) == [200] * 3  # not a proxy
    assert await codes(PROXY, limiter, 2, **brazilian) == [200, 429]


async def test_geoip_with_a_client_ip_of_its_own(
    limiter_for: Callable[..., RateLimiter], geo_db: Path
) -> None:
    # The limiter counts the peer; the country is read behind the proxy.
    source = GeoIPCountry(geo_db, client_ip=ClientIP(trusted_proxies=["10.0.0.0/8"]))
    assert source({"client": (PROXY, 1), "headers": [(b"x-forwarded-for", b"203.0.113.9")]}) == "DE"
    limiter = limiter_for(
        country=source, rules=[Rule(SEARCH, limits=fixed("1/minute"), countries=["DE"])]
    )
    assert await codes(PROXY, limiter, 2, **{"x-forwarded-for": GERMANS[0]}) == [200, 429]


async def test_the_first_source_that_knows_wins(
    limiter_for: Callable[..., RateLimiter], geo_db: Path
) -> None:
    limiter = limiter_for(
        country=[cloudflare(), GeoIPCountry(geo_db)],
        rules=[Rule(SEARCH, limits=fixed("1/minute"), countries=["BR"], key="ip")],
    )
    assert await codes(PROXY, limiter, 2, **{"cf-ipcountry": "BR"}) == [200, 429]
    assert await codes(BRAZILIAN, limiter, 2, **{"cf-ipcountry": "DE"}) == [200, 429]  # GeoIP
    assert await codes(GERMANS[0], limiter, 3, **{"cf-ipcountry": "BR"}) == [200] * 3


async def test_the_country_is_looked_up_only_for_routes_that_need_it(
    limiter_for: Callable[..., RateLimiter],
) -> None:
    asked: list[str] = []

    def country(scope: Any) -> str:
        asked.append(scope["path"])
        return "de"  # upper-cased by the limiter

    limiter = limiter_for(
        country=country,
        rules=[
            Rule(SEARCH, limits=fixed("1/minute"), countries=["DE"], key="global"),
            Rule("/other", limits=fixed("10/minute")),
        ],
        default_limits="100/minute",
    )
    async with client(make_app(limiter)) as http:
        for path in ("/other", "/", "/items/1", SEARCH, SEARCH, "/other"):
            await http.get(path)
        assert (await http.get(SEARCH)).status_code == 429
    assert asked == [SEARCH, SEARCH, SEARCH]


@pytest.mark.parametrize("broken", ["raises", "answers later"])
async def test_a_broken_source_is_logged_once_and_the_next_one_asked(
    limiter_for: Callable[..., RateLimiter], broken: str, caplog: pytest.LogCaptureFixture
) -> None:
    async def later(scope: Any) -> str:
        return "BR"

    def fails(scope: Any) -> str:
        raise RuntimeError("geo service down")

    limiter = limiter_for(
        country=[fails if broken == "raises" else later, lambda scope: "BR"],
        rules=[Rule(SEARCH, limits=fixed("2/minute"), countries=["BR"], key="global")],
    )
    with caplog.at_level(logging.ERROR, logger="asgi_ratelimit"):
        assert await codes(GERMANS[0], limiter, 3) == [200, 200, 429]
    errors = [r.getMessage() for r in caplog.records if r.name == "asgi_ratelimit"]
    assert len(errors) == 1
    assert errors[0].startswith("country source <function")


async def test_the_usage_endpoint_shows_the_callers_country_rules(
    limiter_for: Callable[..., RateLimiter], geo_db: Path
) -> None:
    limiter = limiter_for(
        country=GeoIPCountry(geo_db),
        rules=[
            Rule(SEARCH, limits=fixed("2/minute"), key="country", name="per-country"),
            Rule(SEARCH, limits=fixed("1/minute"), countries=["BR"], name="brazil"),
        ],
    )
    app = make_app(limiter)
    app.add_route("/rate_limit", limiter.usage_endpoint())
    async with client(app, peer=GERMANS[0]) as http:
        await http.get(SEARCH)
    async with client(app, peer=GERMANS[1]) as http:
        resources = (await http.get("/rate_limit")).json()["resources"]
        assert list(resources) == ["per-country"]  # Brazil's rule is not the caller's
        assert resources["per-country"]["remaining"] == 1  # Germany's budget, shared
    async with client(app, peer=BRAZILIAN) as http:
        resources = (await http.get("/rate_limit")).json()["resources"]
        assert [(name, r["remaining"]) for name, r in resources.items()] == [
            ("per-country", 2),
            ("brazil", 1),
        ]


# -- configuration -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"countries": []}, "rule '/search': countries=[] matches no request (list codes"),
        ({"countries": ["DEU"]}, "rule '/search': country 'DEU' is not a country code (use ISO"),
        ({"countries": [" DE"]}, "rule '/search': country ' DE' is not a country code (use ISO"),
        ({"countries": [49]}, "rule '/search': country 49 is not a country code (use ISO"),
        ({"countries": ["xx"]}, "rule '/search': country 'xx' is not a country code ('XX' is"),
        ({"key": "continent"}, "rule '/search': key='continent' is unknown (use 'identity', "),
    ],
)
def test_a_rule_refuses_what_is_not_a_country(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError) as raised:
        Rule(SEARCH, limits="5/minute", **options)
    assert str(raised.value).startswith(message)
    if options.get("key"):
        assert "'country'" in str(raised.value)


@pytest.mark.parametrize(
    ("rule", "message"),
    [
        (
            Rule(SEARCH, limits="5/minute", key="country"),
            "rule '/search': key='country' needs the request's country: pass "
            "RateLimiter(country=...), e.g. country=CountryHeader.cloudflare(",
        ),
        (
            Rule(SEARCH, limits="5/minute", countries=["DE"], name="de"),
            "rule 'de': countries=[...] needs the request's country: pass RateLimiter(country=",
        ),
    ],
)
def test_a_country_rule_needs_a_country_source(rule: Rule, message: str) -> None:
    with pytest.raises(ConfigurationError) as raised:
        RateLimiter(rules=[rule])
    assert str(raised.value).startswith(message)


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (
            lambda: CountryHeader("cf-ipcountry"),
            "CountryHeader('cf-ipcountry'): trusted_proxies is empty, so the header would never",
        ),
        (
            lambda: CountryHeader("cf ipcountry", trusted_proxies=["10.0.0.0/8"]),
            "CountryHeader header 'cf ipcountry' is not a header name (e.g. 'cf-ipcountry'",
        ),
        (
            lambda: CountryHeader.cloudflare(trusted_proxies=["10.0.0.1/8"]),
            "trusted_proxies entry '10.0.0.1/8' is not a valid CIDR",
        ),
        (
            lambda: GeoIPCountry(Path("/nonexistent/GeoLite2-Country.mmdb")),
            "GeoIPCountry: cannot open '/nonexistent/GeoLite2-Country.mmdb' (No such file or "
            "directory); give the path of a MaxMind DB",
        ),
        (
            lambda: GeoIPCountry(__file__),
            f"GeoIPCountry: {__file__!r} is not a MaxMind DB (",
        ),
        (
            lambda: RateLimiter(country="cf-ipcountry"),  # type: ignore[arg-type]
            "country: 'cf-ipcountry' is not a country source (use CountryHeader(...), ",
        ),
    ],
)
def test_country_sources_refuse_a_bad_configuration(build: Any, message: str) -> None:
    with pytest.raises(ConfigurationError) as raised:
        build()
    assert str(raised.value).startswith(message)


def test_geoip_without_the_extra_names_the_install_command(
    geo_db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "maxminddb", None)  # what an absent package looks like
    with pytest.raises(ImportError, match=r'pip install "asgi-rate-limit\[geoip\]"'):
        GeoIPCountry(geo_db)


# -- rules files -------------------------------------------------------------------------


async def test_a_rules_file_takes_a_country_key_and_countries(
    tmp_path: Path, clock: FakeClock, geo_db: Path
) -> None:
    rules = tmp_path / "rules.toml"
    rules.write_text(
        "[[rules]]\n"
        'path = "/search"\n'
        'limits = { rate = "2/minute", algorithm = "fixed_window" }\n'
        'key = "country"\n'
        'countries = ["de", "BR"]\n'
    )
    limiter = RateLimiter(
        backend=MemoryBackend(clock=clock), country=GeoIPCountry(geo_db), rules_file=rules
    )
    assert limiter.rules[0].countries == frozenset({"DE", "BR"})
    assert await codes(GERMANS[0], limiter, 3) == [200, 200, 429]
    assert await codes(BRAZILIAN, limiter, 3) == [200, 200, 429]
    assert await codes(NOWHERE[0], limiter, 3) == [200, 200, 200]

    rules.write_text('[[rules]]\npath = "/search"\nlimits = "2/minute"\ncountries = ["DEU"]\n')
    with pytest.raises(ConfigurationError) as raised:
        limiter.reload_rules()
    assert str(raised.value).startswith(
        f"{rules}:4: rule '/search': country 'DEU' is not a country code"
    )


async def test_a_rules_file_with_a_country_rule_needs_a_country_source(tmp_path: Path) -> None:
    rules = tmp_path / "rules.toml"
    rules.write_text('[[rules]]\npath = "/search"\nlimits = "2/minute"\nkey = "country"\n')
    with pytest.raises(ConfigurationError, match=r"^rule '/search': key='country' needs"):
        RateLimiter(rules_file=rules)


# -- route limits ----------------------------------------------------------------------------


async def test_a_route_limit_counts_per_country(backend: Backend, geo_db: Path) -> None:
    limiter = RateLimiter(backend=backend, country=GeoIPCountry(geo_db))
    app = FastAPI()
    signups = limiter.limit(fixed("2/minute"), key="country", name="signups")

    @app.post("/signup", dependencies=[Depends(signups)])
    async def signup() -> dict[str, str]:
        return {"ok": "yes"}

    async def posts(peer: str, count: int) -> list[int]:
        async with client(app, peer=peer) as http:
            return [(await http.post("/signup")).status_code for _ in range(count)]

    assert await posts(GERMANS[0], 1) == [200]
    assert await posts(GERMANS[1], 2) == [200, 429]  # one German budget
    assert await posts(BRAZILIAN, 3) == [200, 200, 429]
    assert await posts(NOWHERE[0], 1) == [200]
    assert await posts(NOWHERE[1], 2) == [200, 429]  # one budget for the unknown ones
    await limiter.reset("country:DE")
    assert await posts(GERMANS[0], 1) == [200]


def test_a_route_limit_per_country_needs_a_country_source() -> None:
    with pytest.raises(ConfigurationError) as raised:
        RateLimiter().limit("5/minute", key="country")
    assert str(raised.value).startswith(
        "limit(key='country') needs the request's country: pass RateLimiter(country=...)"
    )
