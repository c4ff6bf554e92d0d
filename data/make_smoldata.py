"""Writes data/smoldata/: SmolDataEnvs-style data-analysis tasks over small synthetic CSVs.

Eight data sets are drawn from seeded random generators (no downloads); each question is a snippet of
plain Python over the CSV's rows that sets `answer`. The snippet is both how the gold answer is computed
here and the task's oracle (solution/solve.py runs it on the agent's copy of the data), so a gold answer
can never drift from its data. Grading: tests/grade.py (the shared ladder in data/grade.py) against
tests/expected.json. Deterministic; usage: python data/make_smoldata.py [OUT_DIR]
"""
import csv
import io
import json
import random
import sys

from taskgen import fresh_suite_dir, read_helper, write_task

# ----------------------------------------------------------------------------- data sets


def table(header, rows):
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    w.writerows(rows)
    return buf.getvalue()


def sales(rng):
    prices = {"Widget": 4.5, "Gadget": 12.0, "Gizmo": 7.25, "Doohickey": 19.9, "Sprocket": 2.4}
    regions = ["North", "South", "East", "West"]
    rows = []
    for i in range(120):
        product = rng.choice(list(prices))
        month = rng.randint(1, 12)
        units = rng.randint(1, 12) if rng.random() < 0.8 else rng.randint(13, 40)
        price = round(prices[product] * rng.uniform(0.9, 1.1), 2)
        discount = rng.choice([0, 0, 0, 5, 10, 15])
        rows.append([1000 + i, f"2023-{month:02d}-{rng.randint(1, 28):02d}", rng.choice(regions), product,
                     units, f"{price:.2f}", discount])
    rows.sort(key=lambda r: (r[1], r[0]))
    return table(["order_id", "date", "region", "product", "units", "unit_price", "discount_pct"], rows), \
        "One row per order in 2023. unit_price in EUR; discount_pct is a percentage off the order's price."


def weather(rng):
    climate = {"Lisbon": (27, 17, 0.12, 60), "Oslo": (21, 12, 0.45, 72), "Cairo": (35, 23, 0.02, 40)}
    rows = []
    for city, (tmax, tmin, p_rain, hum) in climate.items():
        for d in range(60):
            month, day = (6, d + 1) if d < 30 else (7, d - 29)
            hi = round(rng.gauss(tmax + d * 0.05, 2.5), 1)
            lo = round(min(hi - 2, rng.gauss(tmin, 2.0)), 1)
            rain = round(rng.expovariate(1 / 6), 1) if rng.random() < p_rain else 0.0
            h = max(10, min(100, round(rng.gauss(hum + (15 if rain else 0), 8))))
            rows.append([f"2023-{month:02d}-{day:02d}", city, hi, lo, rain, h])
    return table(["date", "city", "temp_max_c", "temp_min_c", "rain_mm", "humidity_pct"], rows), \
        "Daily observations, June and July 2023, three cities. rain_mm is the day's precipitation."


def students(rng):
    rows = []
    for i in range(80):
        cls = rng.choice("ABCD")
        base = {"A": 72, "B": 66, "C": 70, "D": 61}[cls]
        tut = rng.random() < 0.3
        bump = 4 if tut else 0
        score = lambda m: max(20, min(100, round(rng.gauss(m, 11))))  # noqa: E731
        rows.append([f"S{i + 1:03d}", cls, score(base + bump), score(base + 3), score(base - 1 + bump),
                     round(min(100.0, rng.gauss(88, 9)), 1), "yes" if tut else "no"])
    return table(["student_id", "class", "math", "reading", "science", "attendance_pct", "tutoring"], rows), \
        "One row per student; scores out of 100; tutoring says whether the student attended extra tutoring."


def penguins(rng):
    species = {"Adelie": (38.8, 18.3, 190, 3700, ["Biscoe", "Dream", "Torgersen"]),
               "Chinstrap": (48.8, 18.4, 196, 3730, ["Dream"]),
               "Gentoo": (47.5, 15.0, 217, 5080, ["Biscoe"])}
    rows = []
    for i in range(100):
        sp = rng.choice(list(species))
        bl, bd, fl, bm, islands = species[sp]
        sex = rng.choice(["male", "female"])
        k = 1.06 if sex == "male" else 0.94
        row = [i + 1, sp, rng.choice(islands), round(rng.gauss(bl, 2.5), 1), round(rng.gauss(bd, 1.0), 1),
               round(rng.gauss(fl, 6)), round(rng.gauss(bm * k, 250) / 25) * 25, sex, rng.choice([2007, 2008, 2009])]
        if rng.random() < 0.06:
            row[6] = "NA"
        if rng.random() < 0.05:
            row[7] = "NA"
        rows.append(row)
    return table(["id", "species", "island", "bill_length_mm", "bill_depth_mm", "flipper_length_mm",
                  "body_mass_g", "sex", "year"], rows), \
        "Field measurements of penguins. Missing values are written NA."


def flights(rng):
    airlines = {"AeroBlue": 8, "SkyJet": 15, "NorthAir": 4, "CoastLine": 11}
    routes = {("LIS", "MAD"): 503, ("LIS", "PAR"): 1453, ("LIS", "LON"): 1585, ("OPO", "MAD"): 420,
              ("OPO", "PAR"): 1215, ("FAO", "LON"): 1760, ("FAO", "DUB"): 1840, ("LIS", "DUB"): 1640}
    rows = []
    for i in range(150):
        al = rng.choice(list(airlines))
        (o, d), dist = rng.choice(list(routes.items()))
        cancelled = 1 if rng.random() < (0.0 if al == "NorthAir" else 0.07) else 0
        delay = "" if cancelled else round(rng.gauss(airlines[al], 20))
        rows.append([f"{al[:2].upper()}{100 + i}", al, o, d, rng.randint(1, 6), delay, dist, cancelled])
    return table(["flight", "airline", "origin", "dest", "month", "dep_delay_min", "distance_km", "cancelled"],
                 rows), "Flights in the first half of 2023. dep_delay_min is empty for cancelled flights " \
                        "(cancelled = 1); negative delays are early departures."


def employees(rng):
    depts = {"Engineering": 92000, "Sales": 68000, "Operations": 61000, "HR": 58000, "Finance": 79000}
    lv = {"junior": 0.75, "mid": 1.0, "senior": 1.35}
    rows = []
    for i in range(90):
        d = rng.choice(list(depts))
        level = rng.choice(list(lv))
        remote = rng.random() < (0.6 if d == "Engineering" else 0.3)
        rows.append([f"E{i + 1:03d}", d, level, round(depts[d] * lv[level] * rng.uniform(0.9, 1.1), -2),
                     rng.randint(2008, 2023), "yes" if remote else "no", rng.choice([2, 3, 3, 4, 4, 4, 5])])
    return table(["emp_id", "department", "level", "salary", "hire_year", "remote", "rating"], rows), \
        "One row per employee. salary is annual, in USD; rating is the last review score, 1 to 5."


def housing(rng):
    hoods = {"Riverside": 2900, "Old Town": 3600, "Hillcrest": 2500, "Lakeview": 3100, "Eastgate": 2100}
    era = {"Riverside": 1985, "Old Town": 1952, "Hillcrest": 1998, "Lakeview": 2004, "Eastgate": 1979}
    rows = []
    for i in range(100):
        h = rng.choice(list(hoods))
        beds = rng.choice([1, 2, 2, 3, 3, 3, 4, 4, 5])
        sqft = round(rng.gauss(450 + 330 * beds, 120))
        year = min(2023, round(rng.gauss(era[h], 14)))
        price = round(sqft * hoods[h] / 10.764 * rng.uniform(0.85, 1.15) * (1.1 if year > 2000 else 1.0), -3)
        rows.append([5001 + i, h, beds, max(1, beds - rng.choice([0, 1, 1, 2])), sqft, year, int(price)])
    return table(["id", "neighborhood", "bedrooms", "bathrooms", "sqft", "year_built", "price"], rows), \
        "Home sales. price in USD, sqft is the living area in square feet."


def movies(rng):
    adj = ["Silent", "Crimson", "Last", "Hidden", "Broken", "Golden", "Electric", "Lonely", "Wild", "Frozen"]
    noun = ["Harbor", "Signal", "Garden", "Empire", "Voyage", "Mirror", "Orchard", "Frontier", "Echo"]
    genres = {"Drama": 6.9, "Comedy": 6.2, "Action": 6.0, "Horror": 5.6, "Sci-Fi": 6.5}
    titles = [f"The {a} {n}" for a in adj for n in noun]
    rng.shuffle(titles)
    rows = []
    for t in titles[:80]:
        g = rng.choices(list(genres), weights=[5, 4, 3, 2, 3])[0]
        runtime = round(rng.gauss(112, 16))
        budget = round(rng.uniform(2, 120), 1)
        rows.append([t, g, rng.randint(1978, 2022), runtime,
                     round(min(9.5, max(2.0, rng.gauss(genres[g] + (runtime - 112) / 60, 0.7))), 1),
                     rng.randint(500, 90000), budget, round(budget * rng.lognormvariate(0.3, 0.8), 1)])
    return table(["title", "genre", "year", "runtime_min", "rating", "votes", "budget_musd", "gross_musd"], rows), \
        "Feature films. budget_musd and gross_musd in millions of USD; rating out of 10."


DATASETS = {"sales": sales, "weather": weather, "students": students, "penguins": penguins,
            "flights": flights, "employees": employees, "housing": housing, "movies": movies}

# ----------------------------------------------------------------------------- questions
# (slug, difficulty, kind, tolerance, ordered, question, code setting `answer`)
# kinds: number, percent, label, yesno, list. Helpers available to code: see HELPERS.

NUM2, NUM1 = {"abs": 0.01}, {"abs": 0.1}
Q = {
    "sales": [
        ("total-units", "easy", "number", {}, False, "How many units were sold in total?",
         "answer = sum(int(r['units']) for r in rows)"),
        ("top-region-revenue", "medium", "label", {}, False,
         "Which region had the highest total revenue? Revenue of an order = units x unit_price x "
         "(1 - discount_pct / 100).",
         "rev = by('region', lambda r: num(r['units']) * num(r['unit_price']) * (1 - num(r['discount_pct']) / 100))\n"
         "answer = top({k: sum(v) for k, v in rev.items()})"),
        ("mean-price-gizmo", "easy", "number", NUM2, False,
         "What is the mean unit_price of Gizmo orders? Round to 2 decimal places.",
         "answer = round(statistics.mean(by('product', 'unit_price')['Gizmo']), 2)"),
        ("busiest-month", "medium", "label", {}, False,
         "In which month were the most orders placed? Answer as YYYY-MM.",
         "answer = top(Counter(r['date'][:7] for r in rows))"),
        ("discounted-share", "medium", "percent", NUM1, False,
         "What percentage of orders had a discount? Round to 1 decimal place.",
         "answer = round(100 * sum(num(r['discount_pct']) > 0 for r in rows) / len(rows), 1)"),
        ("products-over-200-units", "medium", "list", {}, False,
         "Which products sold more than 200 units in total? List them in alphabetical order, separated by commas.",
         "answer = sorted(k for k, v in by('product', 'units').items() if sum(v) > 200)"),
        ("q4-beats-q1", "medium", "yesno", {}, False,
         "Was the total revenue (units x unit_price x (1 - discount_pct / 100)) in Q4 (October to December) "
         "higher than in Q1 (January to March)? Answer yes or no.",
         "rev = lambda q: sum(num(r['units']) * num(r['unit_price']) * (1 - num(r['discount_pct']) / 100)\n"
         "                    for r in rows if int(r['date'][5:7]) in q)\n"
         "answer = 'yes' if rev((10, 11, 12)) > rev((1, 2, 3)) else 'no'"),
        ("median-units", "easy", "number", {}, False, "What is the median number of units per order?",
         "answer = statistics.median(int(r['units']) for r in rows)"),
        ("bulk-orders", "easy", "number", {}, False, "How many orders had 20 or more units?",
         "answer = sum(int(r['units']) >= 20 for r in rows)"),
        ("top3-products-revenue", "hard", "list", {}, True,
         "List the three products with the highest total revenue (units x unit_price x (1 - discount_pct / 100)), "
         "highest first, separated by commas.",
         "rev = by('product', lambda r: num(r['units']) * num(r['unit_price']) * (1 - num(r['discount_pct']) / 100))\n"
         "answer = sorted(rev, key=lambda k: -sum(rev[k]))[:3]"),
    ],
    "weather": [
        ("hottest-city", "easy", "label", {}, False, "Which city has the highest mean temp_max_c?",
         "answer = top({k: statistics.mean(v) for k, v in by('city', 'temp_max_c').items()})"),
        ("rainy-days-oslo", "easy", "number", {}, False, "On how many days did it rain (rain_mm > 0) in Oslo?",
         "answer = sum(r['city'] == 'Oslo' and num(r['rain_mm']) > 0 for r in rows)"),
        ("max-daily-range", "medium", "number", NUM1, False,
         "What is the largest daily temperature range (temp_max_c - temp_min_c) in the data, in degrees? "
         "Round to 1 decimal place.",
         "answer = round(max(num(r['temp_max_c']) - num(r['temp_min_c']) for r in rows), 1)"),
        ("wettest-day-lisbon", "medium", "label", {}, False,
         "On which date did Lisbon get the most rain? Answer as YYYY-MM-DD.",
         "answer = top({r['date']: num(r['rain_mm']) for r in rows if r['city'] == 'Lisbon'})"),
        ("total-rain-oslo-july", "easy", "number", NUM1, False,
         "How much rain fell in Oslo in July, in total (mm)? Round to 1 decimal place.",
         "answer = round(sum(num(r['rain_mm']) for r in rows if r['city'] == 'Oslo' and r['date'][5:7] == '07'), 1)"),
        ("mean-humidity-july", "medium", "number", NUM1, False,
         "What is the mean humidity_pct over all cities in July? Round to 1 decimal place.",
         "answer = round(statistics.mean(num(r['humidity_pct']) for r in rows if r['date'][5:7] == '07'), 1)"),
        ("cities-over-30", "medium", "list", {}, False,
         "Which cities had a temp_max_c above 30 on at least 10 days? List them alphabetically, separated by commas.",
         "answer = sorted(k for k, v in by('city', 'temp_max_c').items() if sum(x > 30 for x in v) >= 10)"),
        ("humidity-rain-correlated", "hard", "yesno", {}, False,
         "Across all rows, is the Pearson correlation between humidity_pct and rain_mm greater than 0.3? "
         "Answer yes or no.",
         "c = statistics.correlation([num(r['humidity_pct']) for r in rows], [num(r['rain_mm']) for r in rows])\n"
         "answer = 'yes' if c > 0.3 else 'no'"),
        ("dry-streak-oslo", "hard", "number", {}, False,
         "What is the longest run of consecutive days without rain (rain_mm == 0) in Oslo?",
         "best = run = 0\n"
         "for r in sorted((r for r in rows if r['city'] == 'Oslo'), key=lambda r: r['date']):\n"
         "    run = run + 1 if num(r['rain_mm']) == 0 else 0\n"
         "    best = max(best, run)\n"
         "answer = best"),
        ("warm-days-share-oslo", "medium", "percent", NUM1, False,
         "On what percentage of days did Oslo's temp_max_c exceed 22? Round to 1 decimal place.",
         "v = by('city', 'temp_max_c')['Oslo']\n"
         "answer = round(100 * sum(x > 22 for x in v) / len(v), 1)"),
    ],
    "students": [
        ("mean-math", "easy", "number", NUM2, False, "What is the mean math score? Round to 2 decimal places.",
         "answer = round(statistics.mean(num(r['math']) for r in rows), 2)"),
        ("best-class-science", "medium", "label", {}, False, "Which class has the highest mean science score?",
         "answer = top({k: statistics.mean(v) for k, v in by('class', 'science').items()})"),
        ("all-subjects-70", "medium", "number", {}, False,
         "How many students scored at least 70 in all three subjects (math, reading, science)?",
         "answer = sum(all(num(r[s]) >= 70 for s in ('math', 'reading', 'science')) for r in rows)"),
        ("tutoring-math", "hard", "yesno", {}, False,
         "Do students who attended tutoring have a higher mean math score than those who did not? Answer yes or no.",
         "m = {k: statistics.mean(v) for k, v in by('tutoring', 'math').items()}\n"
         "answer = 'yes' if m['yes'] > m['no'] else 'no'"),
        ("top-student", "medium", "label", {}, False,
         "Which student (student_id) has the highest total of the three scores?",
         "answer = top({r['student_id']: num(r['math']) + num(r['reading']) + num(r['science']) for r in rows})"),
        ("low-attendance-share", "medium", "percent", NUM1, False,
         "What percentage of students have an attendance_pct below 80? Round to 1 decimal place.",
         "answer = round(100 * sum(num(r['attendance_pct']) < 80 for r in rows) / len(rows), 1)"),
        ("reading-stdev", "hard", "number", NUM2, False,
         "What is the sample standard deviation of the reading scores? Round to 2 decimal places.",
         "answer = round(statistics.stdev(num(r['reading']) for r in rows), 2)"),
        ("classes-math-over-70", "medium", "list", {}, False,
         "Which classes have a mean math score above 70? List them alphabetically, separated by commas.",
         "answer = sorted(k for k, v in by('class', 'math').items() if statistics.mean(v) > 70)"),
        ("median-attendance-b", "easy", "number", NUM1, False,
         "What is the median attendance_pct of class B? Round to 1 decimal place.",
         "answer = round(statistics.median(by('class', 'attendance_pct')['B']), 1)"),
    ],
    "penguins": [
        ("missing-mass", "easy", "number", {}, False, "How many penguins have no recorded body mass?",
         "answer = sum(num(r['body_mass_g']) is None for r in rows)"),
        ("heaviest-species", "easy", "label", {}, False,
         "Which species has the highest mean body mass (ignoring missing values)?",
         "answer = top({k: statistics.mean(v) for k, v in by('species', 'body_mass_g').items()})"),
        ("mean-flipper-gentoo", "easy", "number", NUM1, False,
         "What is the mean flipper length of Gentoo penguins, in mm? Round to 1 decimal place.",
         "answer = round(statistics.mean(by('species', 'flipper_length_mm')['Gentoo']), 1)"),
        ("adelie-islands", "easy", "list", {}, False,
         "On which islands were Adelie penguins recorded? List them alphabetically, separated by commas.",
         "answer = sorted({r['island'] for r in rows if r['species'] == 'Adelie'})"),
        ("males-heavier", "medium", "yesno", {}, False,
         "Among penguins of known sex and mass, are males heavier than females on average? Answer yes or no.",
         "m = {k: statistics.mean(v) for k, v in by('sex', 'body_mass_g').items() if k != 'NA'}\n"
         "answer = 'yes' if m['male'] > m['female'] else 'no'"),
        ("biscoe-share", "medium", "percent", NUM1, False,
         "What percentage of the penguins were recorded on Biscoe? Round to 1 decimal place.",
         "answer = round(100 * sum(r['island'] == 'Biscoe' for r in rows) / len(rows), 1)"),
        ("longest-bill-ratio", "hard", "number", {}, False,
         "Which penguin (id) has the largest ratio of bill length to bill depth?",
         "answer = int(top({r['id']: num(r['bill_length_mm']) / num(r['bill_depth_mm']) for r in rows}))"),
        ("dream-2008", "easy", "number", {}, False, "How many penguins were recorded on Dream in 2008?",
         "answer = sum(r['island'] == 'Dream' and r['year'] == '2008' for r in rows)"),
        ("median-mass-chinstrap-female", "medium", "number", {"abs": 0.5}, False,
         "What is the median body mass of female Chinstrap penguins, in grams (ignoring missing values)?",
         "answer = statistics.median(by('species', 'body_mass_g', lambda r: r['sex'] == 'female')['Chinstrap'])"),
    ],
    "flights": [
        ("cancel-rate", "easy", "percent", NUM1, False,
         "What percentage of flights were cancelled? Round to 1 decimal place.",
         "answer = round(100 * sum(r['cancelled'] == '1' for r in rows) / len(rows), 1)"),
        ("worst-delay-airline", "medium", "label", {}, False,
         "Which airline has the highest mean departure delay (flights that were not cancelled)?",
         "answer = top({k: statistics.mean(v) for k, v in by('airline', 'dep_delay_min').items()})"),
        ("farthest-destination", "easy", "label", {}, False,
         "Which destination airport has the largest mean flight distance?",
         "answer = top({k: statistics.mean(v) for k, v in by('dest', 'distance_km').items()})"),
        ("delayed-over-40", "easy", "number", {}, False,
         "How many flights departed more than 40 minutes late?",
         "answer = sum(num(r['dep_delay_min']) is not None and num(r['dep_delay_min']) > 40 for r in rows)"),
        ("early-share", "medium", "percent", NUM1, False,
         "Of the flights that were not cancelled, what percentage departed early (negative delay)? "
         "Round to 1 decimal place.",
         "d = [num(r['dep_delay_min']) for r in rows if r['cancelled'] == '0']\n"
         "answer = round(100 * sum(x < 0 for x in d) / len(d), 1)"),
        ("busiest-origin", "easy", "label", {}, False, "Which origin airport has the most flights?",
         "answer = top(Counter(r['origin'] for r in rows))"),
        ("never-cancelled", "medium", "list", {}, False,
         "Which airlines had no cancelled flights? List them alphabetically, separated by commas.",
         "answer = sorted(k for k, v in by('airline').items() if not any(r['cancelled'] == '1' for r in v))"),
        ("worst-month", "hard", "number", {}, False,
         "In which month (1-6) was the mean departure delay of non-cancelled flights highest? Answer with the "
         "month number.",
         "answer = int(top({k: statistics.mean(v) for k, v in by('month', 'dep_delay_min').items()}))"),
        ("skyjet-distance", "medium", "number", {}, False,
         "What total distance (km) did SkyJet fly, counting only flights that were not cancelled?",
         "answer = sum(int(r['distance_km']) for r in rows if r['airline'] == 'SkyJet' and r['cancelled'] == '0')"),
    ],
    "employees": [
        ("median-salary", "easy", "number", {"abs": 0.5}, False, "What is the median salary?",
         "answer = statistics.median(num(r['salary']) for r in rows)"),
        ("best-paid-department", "medium", "label", {}, False, "Which department has the highest mean salary?",
         "answer = top({k: statistics.mean(v) for k, v in by('department', 'salary').items()})"),
        ("remote-share", "easy", "percent", NUM1, False,
         "What percentage of employees work remotely? Round to 1 decimal place.",
         "answer = round(100 * sum(r['remote'] == 'yes' for r in rows) / len(rows), 1)"),
        ("senior-engineers", "easy", "number", {}, False, "How many senior employees work in Engineering?",
         "answer = sum(r['department'] == 'Engineering' and r['level'] == 'senior' for r in rows)"),
        ("remote-paid-more", "hard", "yesno", {}, False,
         "Excluding the Engineering department, do remote employees earn more on average than the others? "
         "Answer yes or no.",
         "m = {k: statistics.mean(v) for k, v in by('remote', 'salary', lambda r: r['department'] != "
         "'Engineering').items()}\n"
         "answer = 'yes' if m['yes'] > m['no'] else 'no'"),
        ("departments-over-75k", "medium", "list", {}, False,
         "Which departments have a mean salary above 75000? List them alphabetically, separated by commas.",
         "answer = sorted(k for k, v in by('department', 'salary').items() if statistics.mean(v) > 75000)"),
        ("hired-before-2015", "easy", "number", {}, False, "How many employees were hired before 2015?",
         "answer = sum(int(r['hire_year']) < 2015 for r in rows)"),
        ("sales-rating", "easy", "number", NUM2, False,
         "What is the mean rating in the Sales department? Round to 2 decimal places.",
         "answer = round(statistics.mean(by('department', 'rating')['Sales']), 2)"),
        ("raise-cost", "hard", "number", {"abs": 0.5}, False,
         "Every employee rated 5 gets a 10 % raise. How much do the raises cost per year in total (USD)?",
         "answer = round(sum(0.1 * num(r['salary']) for r in rows if r['rating'] == '5'), 2)"),
    ],
    "housing": [
        ("mean-price", "easy", "number", {"abs": 1}, False,
         "What is the mean sale price? Round to the nearest dollar.",
         "answer = round(statistics.mean(num(r['price']) for r in rows))"),
        ("priciest-per-sqft", "medium", "label", {}, False,
         "Which neighborhood has the highest mean price per square foot (price / sqft, averaged over homes)?",
         "answer = top({k: statistics.mean(v) for k, v in by('neighborhood', lambda r: num(r['price']) / "
         "num(r['sqft'])).items()})"),
        ("sqft-price-corr", "hard", "number", {"abs": 0.001}, False,
         "What is the Pearson correlation between sqft and price? Round to 3 decimal places.",
         "answer = round(statistics.correlation([num(r['sqft']) for r in rows], [num(r['price']) for r in rows]), 3)"),
        ("three-bed-under-400k", "easy", "number", {}, False,
         "How many 3-bedroom homes sold for less than 400000?",
         "answer = sum(r['bedrooms'] == '3' and num(r['price']) < 400000 for r in rows)"),
        ("oldest-neighborhood", "medium", "label", {}, False,
         "Which neighborhood has the oldest homes, by median year_built?",
         "answer = top({k: -statistics.median(v) for k, v in by('neighborhood', 'year_built').items()})"),
        ("built-after-2000", "easy", "percent", NUM1, False,
         "What percentage of the homes were built after 2000? Round to 1 decimal place.",
         "answer = round(100 * sum(int(r['year_built']) > 2000 for r in rows) / len(rows), 1)"),
        ("neighborhoods-over-400k", "medium", "list", {}, False,
         "Which neighborhoods have a mean price above 400000? List them alphabetically, separated by commas.",
         "answer = sorted(k for k, v in by('neighborhood', 'price').items() if statistics.mean(v) > 400000)"),
        ("big-homes-premium", "hard", "yesno", {}, False,
         "Is the mean price of homes with 4 or more bedrooms more than twice the mean price of 2-bedroom homes? "
         "Answer yes or no.",
         "big = statistics.mean(num(r['price']) for r in rows if int(r['bedrooms']) >= 4)\n"
         "two = statistics.mean(num(r['price']) for r in rows if r['bedrooms'] == '2')\n"
         "answer = 'yes' if big > 2 * two else 'no'"),
        ("most-expensive", "easy", "number", {}, False, "What is the id of the most expensive home?",
         "answer = int(top({r['id']: num(r['price']) for r in rows}))"),
    ],
    "movies": [
        ("commonest-genre", "easy", "label", {}, False, "Which genre has the most films?",
         "answer = top(Counter(r['genre'] for r in rows))"),
        ("drama-runtime", "easy", "number", NUM1, False,
         "What is the mean runtime of Drama films, in minutes? Round to 1 decimal place.",
         "answer = round(statistics.mean(by('genre', 'runtime_min')['Drama']), 1)"),
        ("best-return", "medium", "label", {}, False,
         "Which film has the highest ratio of gross to budget? Answer with its title.",
         "answer = top({r['title']: num(r['gross_musd']) / num(r['budget_musd']) for r in rows})"),
        ("flops", "medium", "number", {}, False, "How many films grossed less than their budget?",
         "answer = sum(num(r['gross_musd']) < num(r['budget_musd']) for r in rows)"),
        ("rated-over-7", "easy", "percent", NUM1, False,
         "What percentage of films have a rating of 7.0 or more? Round to 1 decimal place.",
         "answer = round(100 * sum(num(r['rating']) >= 7.0 for r in rows) / len(rows), 1)"),
        ("genres-rated-over-6-5", "medium", "list", {}, False,
         "Which genres have a mean rating above 6.5? List them alphabetically, separated by commas.",
         "answer = sorted(k for k, v in by('genre', 'rating').items() if statistics.mean(v) > 6.5)"),
        ("busiest-decade", "medium", "number", {}, False,
         "Which decade has the most films? Answer with its first year, e.g. 1990.",
         "answer = top(Counter(int(r['year']) // 10 * 10 for r in rows))"),
        ("longer-rated-higher", "hard", "yesno", {}, False,
         "Is the Pearson correlation between runtime_min and rating positive? Answer yes or no.",
         "c = statistics.correlation([num(r['runtime_min']) for r in rows], [num(r['rating']) for r in rows])\n"
         "answer = 'yes' if c > 0 else 'no'"),
        ("gross-2010s", "medium", "number", NUM1, False,
         "What is the total gross (millions of USD) of films released from 2010 to 2019? Round to 1 decimal place.",
         "answer = round(sum(num(r['gross_musd']) for r in rows if 2010 <= int(r['year']) <= 2019), 1)"),
    ],
}

PRELUDE = '''"""Oracle: computes the answer from {csv} with the standard library and writes answer.txt."""
import csv
import statistics
from collections import Counter, defaultdict

rows = list(csv.DictReader(open("{csv}", newline="")))
'''
HELPERS = '''

def num(v):
    """A cell as a number; None when missing ("" or NA)."""
    return None if v in ("", "NA") else float(v)


def by(key, value=None, where=lambda r: True):
    """{group: [values]}: value is a column (missing cells skipped), a function of the row, or None (rows)."""
    groups = defaultdict(list)
    for r in rows:
        if where(r):
            v = r if value is None else value(r) if callable(value) else num(r[value])
            if v is not None:
                groups[r[key]].append(v)
    return dict(groups)


def top(d):
    """The key with the largest value (unique by construction of the data)."""
    best = max(d.values())
    keys = [k for k, v in d.items() if v == best]
    assert len(keys) == 1, keys
    return keys[0]


'''
FOOTER = '''

if isinstance(answer, float) and answer.is_integer():
    answer = int(answer)
text = ", ".join(map(str, answer)) if isinstance(answer, list) else str(answer)
open("answer.txt", "w").write(text + "\\n")
'''
TEST_SH = '''#!/usr/bin/env bash
# Grade answer.txt against expected.json with the shared ladder: exact -> numeric with tolerance -> list.
python3 -S "$TESTS_DIR/grade.py" "$TESTS_DIR/expected.json" answer.txt "$LOGS_DIR"
'''
KIND_HINT = {"number": "a number", "percent": "a percentage; the % sign is optional",
             "label": "the value exactly as it appears in the data", "yesno": "yes or no",
             "list": "a comma-separated list"}


def main(argv):
    out = fresh_suite_dir(argv, "smoldata")
    for ds, make in DATASETS.items():
        data, about = make(random.Random(f"smoldata/{ds}"))
        csv_path = f"data/{ds}.csv"
        readme = f"# {ds}\n\n{about}\n\nFile: `{csv_path}` ({data.count(chr(10)) - 1} rows).\n"
        for slug, difficulty, kind, tol, ordered, question, code in Q[ds]:
            solve_py = PRELUDE.format(csv=csv_path) + HELPERS + code + FOOTER
            scope = {"rows": list(csv.DictReader(io.StringIO(data)))}   # the gold answer: the oracle's code
            exec("import statistics\nfrom collections import Counter, defaultdict\n" + HELPERS + code, scope)
            gold = scope["answer"]
            gold = int(gold) if isinstance(gold, float) and gold.is_integer() else gold
            expected = {"answer": gold, "kind": kind, "tolerance": tol, "ordered": ordered}
            instruction = (f"The CSV file `{csv_path}` in your working directory holds this data: {about}\n\n"
                           f"{question}\n\nWrite only the answer ({KIND_HINT[kind]}) to a file named `answer.txt` "
                           f"in your working directory.")
            write_task(out, f"{ds}-{slug}", source="smoldata", type="analysis", difficulty=difficulty,
                       instruction=instruction, environment={csv_path: data, "README.md": readme},
                       tests={"test.sh": TEST_SH, "grade.py": read_helper("grade.py"),
                              "expected.json": json.dumps(expected, sort_keys=True) + "\n"},
                       solution={"solve.sh": '#!/usr/bin/env bash\npython3 "$SOLUTION_DIR/solve.py"\n',
                                 "solve.py": solve_py},
                       agent_timeout=300, verifier_timeout=20, tags=["smoldata", ds, kind])


if __name__ == "__main__":
    main(sys.argv)
