"""The ``projects`` sample: an engineering and construction firm's projects, generated offline.

English names and values. What each table holds (primary key first):

* ``departments``: the firm's 8 departments (Civil Engineering, Construction Management...) and
  the city of their office.
* ``employees``: 70 staff: full name, job title, department, hire date.
* ``clients``: 30 clients (a library district, hospitals, a transit authority...) with their
  industry and city.
* ``projects``: 60 projects ("Riverside Library Renovation"): client, project manager (an
  employee of the project's department), department, status (planning, active, on hold,
  completed), budget and start date (planned start, for projects still in planning).
* ``contractors``: 40 subcontracting companies ("Apex Electrical Ltd"), their trade and city.
* ``contracts``: contracts between a project and a contractor: number ("C-2023-014", numbered
  per year of signing), signing date, amount.
* ``change_orders``: changes to a contract's amount (``amount_delta``, negative for a credit),
  requested by an employee who works on the project, with the date and the reason.
* ``invoices``: contractors' progress invoices against a contract: number, date, amount and
  status (paid, pending while under 30 days old, overdue after that).
* ``timesheets``: hours an employee booked on a project on a working day.

The foreign-key graph has cycles (``departments - employees - projects - departments``,
``employees - projects - timesheets - employees``, ``employees - change_orders - contracts -
projects - employees``) and parallel routes: an employee reaches a project as its manager or
through timesheets; a department reaches a project directly or through its manager.

The values agree with each other: a project's contracts add up to less than its budget, work
(contracts, invoices, change orders, hours) falls between a project's start and its end or the
snapshot day 2024-06-30, projects in planning have no hours booked, nobody books hours before
being hired, and an invoice's total never passes its contract's amount plus changes. Everything
is drawn from one ``random.Random(seed)`` with fixed dates and inserted in key order, so a build
gives the same bytes every time.
"""

from __future__ import annotations

import math
import random
import sqlite3
from dataclasses import dataclass
from datetime import date, timedelta

from data_pipeline.sqlite_build import serialize_database

SEED = 20240630
"""Seed of the one random generator the build draws from."""

SNAPSHOT = date(2024, 6, 30)
"""The day the data describes: no contract, invoice, change or hours after it."""

DDL = """
CREATE TABLE departments (
    department_id INTEGER PRIMARY KEY,
    name VARCHAR(60) NOT NULL,
    city VARCHAR(40)
);
CREATE TABLE employees (
    employee_id INTEGER PRIMARY KEY,
    full_name VARCHAR(60) NOT NULL,
    title VARCHAR(40),
    department_id INTEGER NOT NULL REFERENCES departments(department_id),
    hire_date DATE
);
CREATE TABLE clients (
    client_id INTEGER PRIMARY KEY,
    name VARCHAR(80) NOT NULL,
    industry VARCHAR(30),
    city VARCHAR(40)
);
CREATE TABLE projects (
    project_id INTEGER PRIMARY KEY,
    name VARCHAR(80) NOT NULL,
    client_id INTEGER NOT NULL REFERENCES clients(client_id),
    manager_id INTEGER NOT NULL REFERENCES employees(employee_id),
    department_id INTEGER NOT NULL REFERENCES departments(department_id),
    status VARCHAR(12),
    budget DECIMAL(12, 2),
    start_date DATE
);
CREATE TABLE contractors (
    contractor_id INTEGER PRIMARY KEY,
    company_name VARCHAR(80) NOT NULL,
    trade VARCHAR(30),
    city VARCHAR(40)
);
CREATE TABLE contracts (
    contract_id INTEGER PRIMARY KEY,
    contract_no VARCHAR(12) NOT NULL UNIQUE,
    project_id INTEGER NOT NULL REFERENCES projects(project_id),
    contractor_id INTEGER NOT NULL REFERENCES contractors(contractor_id),
    signed_date DATE,
    amount DECIMAL(12, 2)
);
CREATE TABLE change_orders (
    change_id INTEGER PRIMARY KEY,
    contract_id INTEGER NOT NULL REFERENCES contracts(contract_id),
    requested_by INTEGER NOT NULL REFERENCES employees(employee_id),
    change_date DATE,
    amount_delta DECIMAL(12, 2),
    reason VARCHAR(120)
);
CREATE TABLE invoices (
    invoice_id INTEGER PRIMARY KEY,
    invoice_no VARCHAR(14) NOT NULL UNIQUE,
    contract_id INTEGER NOT NULL REFERENCES contracts(contract_id),
    issued_date DATE,
    amount DECIMAL(12, 2),
    status VARCHAR(10)
);
CREATE TABLE timesheets (
    timesheet_id INTEGER PRIMARY KEY,
    employee_id INTEGER NOT NULL REFERENCES employees(employee_id),
    project_id INTEGER NOT NULL REFERENCES projects(project_id),
    work_date DATE,
    hours REAL
);
"""

# --------------------------------------------------------------------------- reference data

# (name, city, staff titles); the last department plans and controls every project but leads none.
_DEPARTMENTS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("Civil Engineering", "Chicago", (
        "Department Director", "Senior Project Manager", "Project Manager", "Project Manager", "Civil Engineer",
        "Civil Engineer", "Civil Engineer", "Site Engineer", "CAD Technician")),
    ("Structural Engineering", "Chicago", (
        "Department Director", "Senior Project Manager", "Project Manager", "Senior Structural Engineer",
        "Structural Engineer", "Structural Engineer", "Structural Engineer", "Drafter")),
    ("Building Services", "Denver", (
        "Department Director", "Project Manager", "Project Manager", "Electrical Engineer", "Electrical Engineer",
        "Mechanical Engineer", "Mechanical Engineer", "Plumbing Designer", "Fire Protection Engineer")),
    ("Construction Management", "Boston", (
        "Department Director", "Senior Project Manager", "Senior Project Manager", "Project Manager",
        "Project Manager", "Site Superintendent", "Site Superintendent", "Safety Officer", "Field Engineer",
        "Field Engineer", "Project Engineer")),
    ("Transportation & Infrastructure", "Atlanta", (
        "Department Director", "Senior Project Manager", "Project Manager", "Project Manager",
        "Transportation Engineer", "Transportation Engineer", "Traffic Engineer", "Land Surveyor")),
    ("Environmental & Water", "Seattle", (
        "Department Director", "Project Manager", "Project Manager", "Environmental Engineer",
        "Environmental Engineer", "Hydrologist", "Environmental Scientist")),
    ("Architecture & Interiors", "Austin", (
        "Department Director", "Senior Project Manager", "Project Manager", "Architect", "Architect",
        "Interior Designer", "BIM Coordinator", "Landscape Architect")),
    ("Project Controls", "Chicago", (
        "Department Director", "Cost Controller", "Cost Controller", "Scheduler", "Scheduler", "Estimator",
        "Estimator", "Quantity Surveyor", "Document Controller", "Contracts Administrator")),
)  # fmt: skip
_MANAGER_TITLES = ("Project Manager", "Senior Project Manager")
_CONTROLS = len(_DEPARTMENTS)  # department_id of Project Controls

_FIRST_NAMES = (
    "James", "Mary", "Robert", "Patricia", "John", "Jennifer", "Michael", "Linda", "David", "Elizabeth",
    "William", "Barbara", "Richard", "Susan", "Joseph", "Jessica", "Thomas", "Karen", "Christopher", "Sarah",
    "Daniel", "Lisa", "Matthew", "Nancy", "Anthony", "Sandra", "Mark", "Ashley", "Steven", "Emily", "Andrew",
    "Michelle", "Kevin", "Amanda", "Brian", "Melissa", "Carlos", "Maria", "Raj", "Priya", "Wei", "Mei",
    "Hiroshi", "Yuki", "Omar", "Fatima", "Diego", "Sofia", "Liam", "Olivia", "Noah", "Emma", "Ethan", "Ava",
)  # fmt: skip
_LAST_NAMES = (
    "Smith", "Johnson", "Williams", "Brown", "Jones", "Garcia", "Miller", "Davis", "Rodriguez", "Martinez",
    "Hernandez", "Lopez", "Wilson", "Anderson", "Thomas", "Taylor", "Moore", "Jackson", "Martin", "Lee",
    "Thompson", "White", "Harris", "Clark", "Lewis", "Robinson", "Walker", "Young", "Allen", "King", "Wright",
    "Scott", "Green", "Baker", "Adams", "Nelson", "Hill", "Campbell", "Mitchell", "Carter", "Roberts", "Patel",
    "Chen", "Nguyen", "Kim", "Sullivan", "O'Brien", "Murphy", "Kowalski", "Novak", "Fischer", "Rossi",
)  # fmt: skip

# (name, industry, city, place word used in project names)
_CLIENTS: tuple[tuple[str, str, str, str], ...] = (
    ("Riverside County Library District", "Public Sector", "Riverside", "Riverside"),
    ("City of Lakewood", "Public Sector", "Lakewood", "Lakewood"),
    ("Harbor Point Health System", "Healthcare", "Baltimore", "Harbor Point"),
    ("St. Anne's Medical Center", "Healthcare", "Chicago", "St. Anne's"),
    ("Northgate Retail Partners", "Retail", "Columbus", "Northgate"),
    ("Summit Ridge School District", "Education", "Denver", "Summit Ridge"),
    ("Brookfield State University", "Education", "Madison", "Brookfield"),
    ("Metro Transit Authority", "Transportation", "Atlanta", "Metro"),
    ("Pinecrest Hotels Group", "Hospitality", "Orlando", "Pinecrest"),
    ("Crescent Bay Properties", "Real Estate", "San Diego", "Crescent Bay"),
    ("Ironwood Manufacturing Co.", "Manufacturing", "Milwaukee", "Ironwood"),
    ("Bluewater Utilities", "Energy", "Seattle", "Bluewater"),
    ("Cedar Valley Water District", "Public Sector", "Boise", "Cedar Valley"),
    ("Oakmont Senior Living", "Healthcare", "Phoenix", "Oakmont"),
    ("Greenfield Logistics", "Transportation", "Memphis", "Greenfield"),
    ("Lakeshore Development Corp.", "Real Estate", "Chicago", "Lakeshore"),
    ("Silverline Data Centers", "Technology", "Austin", "Silverline"),
    ("Maple Grove Community College", "Education", "Minneapolis", "Maple Grove"),
    ("Westbrook Shopping Centers", "Retail", "Dallas", "Westbrook"),
    ("Port of Fairhaven", "Transportation", "Tacoma", "Fairhaven"),
    ("Granite Peak Resorts", "Hospitality", "Salt Lake City", "Granite Peak"),
    ("Redstone Pharmaceuticals", "Manufacturing", "Raleigh", "Redstone"),
    ("Hillcrest Township", "Public Sector", "Cleveland", "Hillcrest"),
    ("Evergreen Housing Trust", "Real Estate", "Portland", "Evergreen"),
    ("Clearwater Energy Cooperative", "Energy", "Tulsa", "Clearwater"),
    ("Union Station Partners", "Real Estate", "Denver", "Union Station"),
    ("Bayview Children's Hospital", "Healthcare", "Boston", "Bayview"),
    ("Copperfield County Schools", "Education", "Nashville", "Copperfield"),
    ("Northern Rail Freight", "Transportation", "Kansas City", "Northern Rail"),
    ("Sunrise Biotech Campus", "Technology", "San Jose", "Sunrise"),
)

# What gets built for each industry: (facility, department_id, budget range in millions, trades needed).
_BUILDING = ("concrete", "structural steel", "electrical", "plumbing", "HVAC", "roofing", "drywall", "glazing",
             "fire protection", "painting", "elevators", "masonry")  # fmt: skip
_CIVIL = ("excavation", "concrete", "paving", "electrical", "landscaping", "demolition")
_FACILITIES: dict[str, tuple[tuple[str, int, tuple[float, float], tuple[str, ...]], ...]] = {
    "Public Sector": (("Library", 7, (2, 12), _BUILDING), ("City Hall", 7, (5, 25), _BUILDING),
                      ("Community Center", 4, (3, 15), _BUILDING), ("Fire Station", 4, (2, 8), _BUILDING),
                      ("Water Treatment Plant", 6, (10, 45), _CIVIL + ("plumbing",)),
                      ("Stormwater Outfall", 6, (1, 6), _CIVIL)),
    "Healthcare": (("Emergency Department", 3, (8, 40), _BUILDING), ("Outpatient Pavilion", 4, (10, 50), _BUILDING),
                   ("Surgical Wing", 3, (15, 60), _BUILDING), ("Parking Structure", 2, (6, 20), _BUILDING[:6])),
    "Education": (("Science Building", 4, (12, 45), _BUILDING), ("Student Union", 7, (8, 30), _BUILDING),
                  ("Gymnasium", 2, (4, 15), _BUILDING), ("Elementary School", 4, (10, 35), _BUILDING)),
    "Retail": (("Shopping Center", 4, (8, 40), _BUILDING), ("Food Court", 7, (1, 5), _BUILDING[2:])),
    "Transportation": (("Bus Depot", 5, (6, 25), _BUILDING[:6] + ("paving",)),
                       ("Light Rail Station", 5, (15, 60), _BUILDING), ("Maintenance Facility", 5, (5, 20), _BUILDING[:6]), ("Freight Yard", 1, (4, 18), _CIVIL),
                       ("Container Terminal", 1, (20, 80), _CIVIL + ("structural steel",))),
    "Hospitality": (("Hotel Tower", 4, (20, 80), _BUILDING), ("Conference Center", 7, (8, 30), _BUILDING),
                    ("Resort Lodge", 7, (6, 25), _BUILDING)),
    "Real Estate": (("Office Tower", 2, (25, 90), _BUILDING), ("Apartment Complex", 4, (12, 45), _BUILDING),
                    ("Mixed-Use Development", 4, (20, 70), _BUILDING)),
    "Manufacturing": (("Assembly Plant", 2, (15, 60), _BUILDING[:6]),
                      ("Distribution Warehouse", 1, (6, 25), _BUILDING[:6]), ("Clean Room", 3, (4, 18), _BUILDING[2:6] + ("fire protection",))),
    "Energy": (("Substation", 3, (3, 14), ("concrete", "electrical", "excavation", "structural steel")),
               ("Pump Station", 6, (2, 10), _CIVIL + ("plumbing",)), ("Solar Farm", 3, (8, 35), _CIVIL)),
    "Technology": (("Data Center", 3, (30, 90), _BUILDING), ("Research Lab", 2, (15, 50), _BUILDING)),
}  # fmt: skip
_WORKS = ("Renovation", "Expansion", "New Build", "Modernization", "Retrofit", "Upgrade", "Seismic Retrofit",
          "Replacement", "Phase 2")  # fmt: skip
_STATUS_COUNTS = (("completed", 18), ("active", 26), ("on hold", 5), ("planning", 11))

# (company name, trade, city)
_CONTRACTORS: tuple[tuple[str, str, str], ...] = (
    ("Apex Electrical Ltd", "electrical", "Chicago"), ("Brightline Electric Inc.", "electrical", "Denver"),
    ("Northstar Power Systems", "electrical", "Minneapolis"),
    ("Voltline Electrical Contractors", "electrical", "Atlanta"),
    ("Clearflow Plumbing Co.", "plumbing", "Boston"), ("Summit Plumbing & Heating", "plumbing", "Denver"),
    ("BlueRiver Pipeworks", "plumbing", "Seattle"), ("Airtech HVAC Services", "HVAC", "Chicago"),
    ("Coolbreeze Mechanical", "HVAC", "Phoenix"), ("Allied Climate Systems", "HVAC", "Dallas"),
    ("Granite Ready-Mix Concrete", "concrete", "Milwaukee"), ("Solidbase Concrete Ltd", "concrete", "Atlanta"),
    ("Keystone Foundations Inc.", "concrete", "Boston"), ("Topline Roofing Co.", "roofing", "Columbus"),
    ("Weatherguard Roofing", "roofing", "Seattle"), ("Ironclad Steel Erectors", "structural steel", "Chicago"),
    ("Midwest Structural Steel", "structural steel", "Kansas City"), ("Redline Excavating", "excavation", "Denver"),
    ("Bedrock Earthworks", "excavation", "Atlanta"), ("Precision Drywall & Interiors", "drywall", "Boston"),
    ("Evenwall Interiors LLC", "drywall", "Austin"), ("Clearview Glass & Glazing", "glazing", "Chicago"),
    ("Crystal Facades Inc.", "glazing", "San Diego"), ("Liftway Elevator Co.", "elevators", "Chicago"),
    ("Summit Vertical Transport", "elevators", "Denver"), ("Firestop Sprinkler Systems", "fire protection", "Boston"),
    ("Guardian Fire Protection", "fire protection", "Dallas"), ("ColorCraft Painting", "painting", "Austin"),
    ("ProFinish Coatings", "painting", "Atlanta"), ("Greenscape Landscaping", "landscaping", "Portland"),
    ("Terra Verde Grounds", "landscaping", "Phoenix"), ("Roadline Paving Co.", "paving", "Memphis"),
    ("Blacktop Asphalt & Paving", "paving", "Columbus"), ("Cornerstone Masonry", "masonry", "Cleveland"),
    ("Heritage Brick & Stone", "masonry", "Boston"), ("Wreckers Demolition Inc.", "demolition", "Chicago"),
    ("Clean Slate Demolition", "demolition", "Seattle"), ("Harbor Electrical Services", "electrical", "Tacoma"),
    ("Peak Mechanical Contractors", "HVAC", "Salt Lake City"), ("Foundation Pros Concrete", "concrete", "Raleigh"),
)  # fmt: skip

# A trade's usual share of a project's budget.
_TRADE_SHARE = {
    "concrete": 0.16, "structural steel": 0.14, "electrical": 0.12, "plumbing": 0.07, "HVAC": 0.11,
    "roofing": 0.04, "drywall": 0.05, "glazing": 0.06, "fire protection": 0.03, "painting": 0.02,
    "elevators": 0.04, "masonry": 0.05, "excavation": 0.12, "paving": 0.1, "landscaping": 0.03, "demolition": 0.05,
}  # fmt: skip
_REASONS_BY_TRADE = {
    "concrete": ("Additional footings after soil report", "Thicker slab for equipment loads"),
    "structural steel": ("Added steel framing for rooftop units", "Connection redesign after RFI"),
    "electrical": ("Additional circuits for client equipment", "Upgraded lighting controls"),
    "plumbing": ("Relocated sanitary lines", "Additional restroom fixtures"),
    "HVAC": ("Upsized air handling unit", "Added exhaust for lab spaces"),
    "roofing": ("Replaced damaged roof deck", "Upgraded roof insulation"),
    "drywall": ("Additional partitions for layout change", "Acoustic walls added"),
    "glazing": ("Switched to triple glazing", "Added storefront entrance"),
    "fire protection": ("Additional sprinkler heads required by inspector", "Fire alarm scope extended"),
    "painting": ("Extra coat on exposed steel", "Color change requested by client"),
    "elevators": ("Added service elevator stop", "Upgraded cab finishes"),
    "masonry": ("Replaced deteriorated brick", "Added retaining wall"),
    "excavation": ("Unforeseen rock removal", "Contaminated soil disposal"),
    "paving": ("Extended parking lot paving", "Additional curb and gutter"),
    "landscaping": ("Added bioswale planting", "Tree replacement after storm"),
    "demolition": ("Asbestos abatement discovered", "Additional slab removal"),
}  # fmt: skip
_REASONS = ("Client-requested design change", "Material price escalation", "Schedule acceleration",
            "Unforeseen site conditions", "Code compliance update")  # fmt: skip
_CREDIT_REASONS = ("Scope reduction credit", "Value engineering savings", "Owner-supplied materials credit",
                   "Unused allowance returned")  # fmt: skip


@dataclass
class _Project:
    pid: int
    name: str
    client_id: int
    department_id: int
    status: str
    budget: float
    start: date
    end: date  # last day of work: completion, the hold, or the snapshot
    trades: tuple[str, ...]
    manager_id: int = 0


# --------------------------------------------------------------------------- helpers


def _day(rng: random.Random, first: date, last: date) -> date:
    return first + timedelta(days=rng.randint(0, max(0, (last - first).days)))


def _workday(rng: random.Random, first: date, last: date) -> date:
    """A Monday-to-Friday day in ``[first, last]`` (``first`` itself when the range has none)."""
    d = _day(rng, first, last)
    if d.weekday() >= 5:  # Saturday or Sunday: the Friday before, else the Monday after
        friday = d - timedelta(days=d.weekday() - 4)
        monday = d + timedelta(days=7 - d.weekday())
        d = friday if friday >= first else monday if monday <= last else first
    return d


def _by_date_project_employee(entry: tuple[tuple[int, int, date], float]) -> tuple[date, int, int]:
    (employee, project, day), _hours = entry
    return day, project, employee


def _money(x: float, step: int = 100) -> float:
    return float(round(x / step) * step)


# --------------------------------------------------------------------------- the build


def build_projects(seed: int = SEED) -> bytes:
    """The ``projects`` sample as the bytes of a SQLite file (the same bytes for the same seed).

    >>> import sqlite3
    >>> conn = sqlite3.connect(":memory:"); conn.deserialize(build_projects())
    >>> conn.execute("SELECT name, city FROM departments WHERE department_id = 1").fetchone()
    ('Civil Engineering', 'Chicago')

    Raises:
        DataError: a generated row breaks a foreign key (a bug in this module).
    """
    rng = random.Random(seed)
    rows: dict[str, list[tuple[object, ...]]] = {}
    rows["departments"] = [(i, name, city) for i, (name, city, _) in enumerate(_DEPARTMENTS, 1)]

    # employees: unique full names; directors and senior managers were hired earlier.
    n_staff = sum(len(titles) for _, _, titles in _DEPARTMENTS)
    names = rng.sample([f"{f} {last}" for f in _FIRST_NAMES for last in _LAST_NAMES], n_staff)
    employees: list[tuple[int, str, str, int, date]] = []
    for dept_id, (_, _, titles) in enumerate(_DEPARTMENTS, 1):
        for title in titles:
            if title == "Department Director" or title.startswith("Senior"):
                hired = _day(rng, date(2006, 1, 1), date(2015, 12, 31))
            elif title == "Project Manager":
                hired = _day(rng, date(2010, 1, 1), date(2020, 12, 31))
            else:
                hired = _day(rng, date(2014, 1, 1), date(2024, 3, 31))
            employees.append((len(employees) + 1, names[len(employees)], title, dept_id, hired))
    rows["employees"] = [(i, n, t, d, h.isoformat()) for i, n, t, d, h in employees]

    rows["clients"] = [(i, name, industry, city) for i, (name, industry, city, _) in enumerate(_CLIENTS, 1)]
    rows["contractors"] = [(i, n, t, c) for i, (n, t, c) in enumerate(_CONTRACTORS, 1)]

    # projects: one or more per client, names unique, status consistent with the dates.
    statuses = [s for s, n in _STATUS_COUNTS for _ in range(n)]
    rng.shuffle(statuses)
    client_order = list(range(1, len(_CLIENTS) + 1)) * 2
    rng.shuffle(client_order)
    projects: list[_Project] = []
    used_names: set[str] = set()
    for pid, status in enumerate(statuses, 1):
        client_id = client_order[pid - 1]
        _, industry, _, place = _CLIENTS[client_id - 1]
        while True:
            facility, dept_id, (low, high), trades = rng.choice(_FACILITIES[industry])
            work = rng.choice(_WORKS)
            name = f"{place} {facility} {work}"
            if name not in used_names:
                break
        used_names.add(name)
        if status == "completed":
            start = _day(rng, date(2019, 3, 1), date(2022, 9, 30))
            end = min(start + timedelta(days=rng.randint(300, 720)), date(2024, 4, 30))
        elif status == "active":
            start = _day(rng, date(2021, 6, 1), date(2024, 4, 30))
            end = SNAPSHOT
        elif status == "on hold":
            start = _day(rng, date(2021, 9, 1), date(2023, 9, 30))
            end = min(start + timedelta(days=rng.randint(120, 400)), date(2024, 5, 31))
        else:  # planning: the planned start, after the snapshot
            start = _day(rng, date(2024, 7, 15), date(2025, 3, 31))
            end = start
        budget = _money(rng.uniform(low, high) * 1_000_000, 10_000)
        if work in ("Upgrade", "Retrofit", "Renovation"):
            budget = _money(budget * 0.5, 10_000)
        projects.append(_Project(pid, name, client_id, dept_id, status, budget, start, end, trades))
    projects.sort(key=lambda p: (p.start, p.name))  # ids follow the start dates
    for pid, p in enumerate(projects, 1):
        p.pid = pid
        hired_by_then = min(p.start, SNAPSHOT)
        staff = [e for e in employees if e[3] == p.department_id]
        managers = [e for e in staff if e[2] in _MANAGER_TITLES and e[4] <= hired_by_then]
        if not managers:
            managers = [e for e in staff if e[2] == "Department Director"]
        p.manager_id = rng.choice(managers)[0]
    rows["projects"] = [
        (p.pid, p.name, p.client_id, p.manager_id, p.department_id, p.status, p.budget, p.start.isoformat())
        for p in projects
    ]

    # timesheets: a team per project (manager, colleagues, a project-controls person), weekdays only.
    team_of: dict[int, list[int]] = {}
    entries: dict[tuple[int, int, date], float] = {}
    for p in projects:
        if p.status == "planning":
            team_of[p.pid] = [p.manager_id]
            continue
        colleagues = [e[0] for e in employees if e[3] == p.department_id and e[0] != p.manager_id]
        support = [e[0] for e in employees if e[3] in (_CONTROLS, 4) and e[3] != p.department_id]
        team = [p.manager_id, *rng.sample(colleagues, min(len(colleagues), rng.randint(2, 3))), rng.choice(support)]
        team_of[p.pid] = team
        n_entries = rng.randint(22, 48)
        for _ in range(n_entries):
            emp = rng.choice(team)
            hired = employees[emp - 1][4]
            first = max(p.start, hired)
            work_date = _workday(rng, first, p.end)
            if work_date > p.end or work_date.weekday() >= 5:
                continue
            entries[emp, p.pid, work_date] = rng.choice((2, 4, 4, 6, 7.5, 8, 8, 8, 9, 10)) / 1.0
    rows["timesheets"] = [
        (i, emp, pid, d.isoformat(), h)
        for i, ((emp, pid, d), h) in enumerate(sorted(entries.items(), key=_by_date_project_employee), 1)
    ]

    # contracts: per trade a contractor of that trade, signed around the start of the works.
    by_trade: dict[str, list[int]] = {}
    for cid, (_, trade, _) in enumerate(_CONTRACTORS, 1):
        by_trade.setdefault(trade, []).append(cid)
    drafts: list[tuple[date, int, int, float, _Project, str]] = []
    early_works = [p for p in projects if p.status == "planning"][:3]
    for p in projects:
        if p.status == "planning":
            if p not in early_works:
                continue
            trades = [t for t in ("demolition", "excavation") if t in p.trades] or [p.trades[0]]
            signed_window = (date(2024, 4, 1), SNAPSHOT)
        else:
            trades = rng.sample(p.trades, min(len(p.trades), rng.randint(2, 5)))
            signed_window = (max(p.start - timedelta(days=45), date(2019, 1, 1)), min(p.end, SNAPSHOT))
        left = p.budget * 0.85
        for trade in trades:
            share = _TRADE_SHARE[trade] * rng.uniform(0.7, 1.3)
            amount = min(_money(p.budget * share), _money(left * 0.6))
            if amount <= 0:
                continue
            left -= amount
            signed = _workday(rng, *signed_window)
            drafts.append((signed, p.pid, rng.choice(by_trade[trade]), amount, p, trade))
    drafts.sort(key=lambda d: (d[0], d[1], d[2]))
    contracts = []
    per_year: dict[int, int] = {}
    for contract_id, (signed, pid, contractor_id, amount, p, trade) in enumerate(drafts, 1):
        per_year[signed.year] = per_year.get(signed.year, 0) + 1
        number = f"C-{signed.year}-{per_year[signed.year]:03d}"
        contracts.append((contract_id, number, pid, contractor_id, signed, amount, p, trade))
    rows["contracts"] = [(c[0], c[1], c[2], c[3], c[4].isoformat(), c[5]) for c in contracts]

    # change_orders, then invoices that never bill more than the contract plus its changes.
    changes = []
    invoices = []
    for contract_id, _number, pid, _contractor, signed, amount, p, trade in contracts:
        work_end = min(p.end, SNAPSHOT)
        span = (work_end - signed).days
        total = amount
        n_changes = 0
        if span > 45 and p.status != "planning":
            n_changes = rng.choices((0, 1, 2, 3), weights=(14, 34, 32, 20))[0]
        for _ in range(n_changes):
            when = _workday(rng, signed + timedelta(days=21), work_end)
            if rng.random() < 0.14:
                delta = -_money(amount * rng.uniform(0.005, 0.03), 10)
                reason = rng.choice(_CREDIT_REASONS)
            else:
                delta = _money(amount * rng.uniform(0.01, 0.08), 10)
                reason = rng.choice(_REASONS_BY_TRADE[trade] + _REASONS)
            total += delta
            requester = rng.choice(team_of[pid])
            if employees[requester - 1][4] > when:
                requester = p.manager_id
            changes.append((when, contract_id, requester, delta, reason))
        n_invoices = 0 if span < 20 else min(5, max(1, span // 120)) if p.status != "completed" else rng.randint(2, 4)
        billable = total if p.status == "completed" else min(amount, total) * rng.uniform(0.35, 0.9)
        cuts = sorted(rng.uniform(0, 1) for _ in range(n_invoices - 1)) if n_invoices else []
        parts = [b - a for a, b in zip([0.0, *cuts], [*cuts, 1.0], strict=True)] if n_invoices else []
        day = signed
        step = max(20, span // max(1, n_invoices))
        for part in parts:
            day = min(day + timedelta(days=rng.randint(step // 2, step)), work_end)
            value = math.floor(billable * part * 100) / 100 if part > 0.02 else 0.0
            if value <= 0:
                continue
            invoices.append((day, contract_id, value))
    changes.sort(key=lambda c: (c[0], c[1]))
    rows["change_orders"] = [(i, c[1], c[2], c[0].isoformat(), c[3], c[4]) for i, c in enumerate(changes, 1)]

    invoices.sort(key=lambda v: (v[0], v[1]))
    rows["invoices"] = []
    per_year = {}
    for invoice_id, (day, contract_id, value) in enumerate(invoices, 1):
        per_year[day.year] = per_year.get(day.year, 0) + 1
        age = (SNAPSHOT - day).days
        if age < 30:
            status = "paid" if rng.random() < 0.2 else "pending"
        elif age < 90:
            status = "paid" if rng.random() < 0.7 else "overdue"
        else:
            status = "paid" if rng.random() < 0.96 else "overdue"
        number = f"INV-{day.year}-{per_year[day.year]:04d}"
        rows["invoices"].append((invoice_id, number, contract_id, day.isoformat(), value, status))

    conn = sqlite3.connect(":memory:")
    try:
        conn.executescript(DDL)
        for table in ("departments", "employees", "clients", "projects", "contractors", "contracts",
                      "change_orders", "invoices", "timesheets"):  # fmt: skip
            data = sorted(rows[table], key=lambda r: r[0])
            marks = ", ".join("?" * len(data[0]))
            conn.executemany(f"INSERT INTO {table} VALUES ({marks})", data)
        return serialize_database(conn, where="projects")
    finally:
        conn.close()
