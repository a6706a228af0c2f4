"""The relative-date table: a sentence, the anchor (session) date, and every expression it must yield.

Expected values were worked out by hand from the calendar, not by running the rules. May 2023 for
orientation (weeks run Monday to Sunday):

    Mo Tu We Th Fr Sa Su
     1  2  3  4  5  6  7
     8  9 10 11 12 13 14
    15 16 17 18 19 20 21      SAT = 2023-05-20, WED = 2023-05-17, MON = 2023-05-15, SUN = 2023-05-21
    22 23 24 25 26 27 28
    29 30 31  (June 1 is a Thursday)
"""

from __future__ import annotations

from dataclasses import dataclass

SAT, SUN, MON, WED = "2023-05-20", "2023-05-21", "2023-05-15", "2023-05-17"


@dataclass(frozen=True)
class Expected:
    expression: str
    start: str
    end: str | None = None  # None: a single day
    approximate: bool = False
    alternatives: tuple[str | tuple[str, str], ...] = ()  # a day, or (start, end)


@dataclass(frozen=True)
class Case:
    text: str
    anchor: str
    expected: tuple[Expected, ...]


def case(text: str, anchor: str, *expected: Expected) -> Case:
    return Case(text, anchor, expected)


E = Expected

CASES: tuple[Case, ...] = (
    # --- days
    case("I finally cleaned the garage today.", SAT, E("today", SAT)),
    case("We are hosting a dinner tonight.", SAT, E("tonight", SAT)),
    case("I ran 5 miles this morning.", SAT, E("this morning", SAT)),
    case("I have a dentist appointment this afternoon.", SAT, E("this afternoon", SAT)),
    case("Let's talk this evening.", SAT, E("this evening", SAT)),
    case("I saw the talk earlier today.", SAT, E("earlier today", SAT)),
    case("I bought the lamp yesterday.", SAT, E("yesterday", "2023-05-19")),
    case("Yesterday morning I went for a swim.", SAT, E("Yesterday morning", "2023-05-19")),
    case("We watched a movie last night.", SAT, E("last night", "2023-05-19")),
    case("It arrived the day before yesterday.", SAT, E("the day before yesterday", "2023-05-18")),
    case("I'm flying out tomorrow.", SAT, E("tomorrow", "2023-05-21")),
    case("The concert is tomorrow night.", SAT, E("tomorrow night", "2023-05-21")),
    case("We leave the day after tomorrow.", SAT, E("the day after tomorrow", "2023-05-22")),
    case("THE PARCEL CAME YESTERDAY", SAT, E("YESTERDAY", "2023-05-19")),
    # --- N units ago / from now
    case("I started 3 days ago.", SAT, E("3 days ago", "2023-05-17")),
    case("I started three days ago.", SAT, E("three days ago", "2023-05-17")),
    case("It happened twenty days ago.", SAT, E("twenty days ago", "2023-04-30")),
    case("I got it a day ago.", SAT, E("a day ago", "2023-05-19")),
    case("I signed up a week ago.", SAT, E("a week ago", "2023-05-13")),
    case("We met two weeks ago at the fair.", SAT, E("two weeks ago", "2023-05-06")),
    case("I bought it a couple of weeks ago.", SAT, E("a couple of weeks ago", "2023-05-06", approximate=True)),
    case("I moved a few days ago.", SAT, E("a few days ago", "2023-05-17", approximate=True)),
    case("I called them several days ago.", SAT, E("several days ago", "2023-05-16", approximate=True)),
    case("I joined the gym a month ago.", SAT, E("a month ago", "2023-04-20", approximate=True)),
    case("I adopted her three months ago.", SAT, E("three months ago", "2023-02-20", approximate=True)),
    case("We moved here 2 years ago.", SAT, E("2 years ago", "2021-05-20", approximate=True)),
    case("I replaced it about three weeks ago.", SAT, E("about three weeks ago", "2023-04-29", approximate=True)),
    case("I wrote to her a fortnight ago.", SAT, E("a fortnight ago", "2023-05-06")),
    case("It broke a week and a half ago.", SAT, E("a week and a half ago", "2023-05-10", approximate=True)),
    case("The trial ends two weeks from now.", SAT, E("two weeks from now", "2023-06-03")),
    case("I watched it a few weeks back, loved it.", SAT, E("a few weeks back", "2023-04-29", approximate=True)),
    case("It was exactly 10 days ago.", SAT, E("exactly 10 days ago", "2023-05-10")),
    case("I moved in on March 31 and the lease started a month ago.", "2023-03-31",
         E("March 31", "2023-03-31"), E("a month ago", "2023-02-28", approximate=True)),  # clamped to the month end
    # --- weeks, months, years
    case("I'm busy this week.", SAT, E("this week", MON, "2023-05-21")),
    case("I went hiking last week.", SAT, E("last week", "2023-05-08", "2023-05-14")),
    case("The course starts next week.", SAT, E("next week", "2023-05-22", "2023-05-28")),
    case("I finished it earlier this week.", SAT, E("earlier this week", MON, "2023-05-19")),
    case("More news later this week.", SAT, E("later this week", SUN, SUN)),
    case("I gained followers the week before last.", SAT, E("the week before last", "2023-05-01", "2023-05-07")),
    case("I paid the rent last month.", SAT, E("last month", "2023-04-01", "2023-04-30")),
    case("I've read two books this month.", SAT, E("this month", "2023-05-01", "2023-05-31")),
    case("The festival is next month.", SAT, E("next month", "2023-06-01", "2023-06-30")),
    case("I renewed it earlier this month.", SAT, E("earlier this month", "2023-05-01", "2023-05-19")),
    case("We'll decide later this month.", SAT, E("later this month", SUN, "2023-05-31")),
    case("I visited Japan last year.", SAT, E("last year", "2022-01-01", "2022-12-31")),
    case("My goal this year is a marathon.", SAT, E("this year", "2023-01-01", "2023-12-31")),
    case("We'll renovate next year.", SAT, E("next year", "2024-01-01", "2024-12-31")),
    case("I switched jobs earlier this year.", SAT, E("earlier this year", "2023-01-01", "2023-05-19")),
    case("This time last year I was in Rome.", SAT, E("This time last year", "2022-05-20", approximate=True)),
    case("I've run every day for the past two weeks.", SAT,
         E("the past two weeks", "2023-05-06", SAT, approximate=True)),
    case("Over the past few months I saved a lot.", SAT, E("the past few months", "2023-02-20", SAT, approximate=True)),
    case("I'll be travelling for the next few days.", SAT, E("the next few days", SAT, "2023-05-23", approximate=True)),
    case("This past month was hectic.", SAT, E("This past month", "2023-04-20", SAT, approximate=True)),
    case("Last week of school.", SAT),  # "last week of ...": the final week of something, no date
    # --- weekends
    case("Any plans this weekend?", SAT, E("this weekend", SAT, SUN)),
    case("I went to IKEA last weekend.", SAT, E("last weekend", "2023-05-13", "2023-05-14")),
    case("This past weekend I painted.", SAT, E("This past weekend", "2023-05-13", "2023-05-14")),
    case("We'll go next weekend.", SAT, E("next weekend", "2023-05-27", "2023-05-28")),
    case("I cleaned the garage over the weekend.", SAT, E("over the weekend", SAT, SUN)),
    case("Let's meet next weekend.", WED,
         E("next weekend", "2023-05-27", "2023-05-28", alternatives=((SAT, SUN),))),
    case("I cleaned the garage over the weekend.", WED,
         E("over the weekend", "2023-05-13", "2023-05-14", alternatives=((SAT, SUN),))),
    case("This coming weekend is free.", WED, E("This coming weekend", SAT, SUN)),
    case("This past weekend I painted.", SUN,
         E("This past weekend", "2023-05-13", "2023-05-14", alternatives=((SAT, SUN),))),
    case("Any plans this weekend?", SUN, E("this weekend", SAT, SUN)),
    case("I went to IKEA last weekend.", MON, E("last weekend", "2023-05-13", "2023-05-14")),
    case("I got it the week before last weekend.", SAT, E("last weekend", "2023-05-13", "2023-05-14")),
    # --- weekdays
    case("I bought it last Friday.", SAT, E("last Friday", "2023-05-12", alternatives=("2023-05-19",))),
    case("We stayed up late last Friday night.", SAT,
         E("last Friday night", "2023-05-12", alternatives=("2023-05-19",))),
    case("I went to church last Sunday.", SAT, E("last Sunday", "2023-05-14")),
    case("I visited the market last Saturday.", SAT, E("last Saturday", "2023-05-13")),
    case("I visited the market last Saturday.", SUN, E("last Saturday", "2023-05-13", alternatives=(SAT,))),
    case("I met her this past Friday.", SAT, E("this past Friday", "2023-05-19")),
    case("The party is this Friday.", SAT, E("this Friday", "2023-05-26", alternatives=("2023-05-19",))),
    case("Are you free this Sunday?", SAT, E("this Sunday", SUN)),
    case("The deadline is next Friday.", SAT, E("next Friday", "2023-05-26")),
    case("See you this coming Monday.", SAT, E("this coming Monday", "2023-05-22")),
    case("I made soup on Friday.", SAT, E("on Friday", "2023-05-19", alternatives=("2023-05-26",))),
    case("I did 5 miles on Saturday.", SAT, E("on Saturday", SAT, alternatives=("2023-05-27",))),
    case("I had a meeting last Monday.", WED, E("last Monday", "2023-05-08", alternatives=(MON,))),
    case("I had a meeting last Thursday.", WED, E("last Thursday", "2023-05-11")),
    case("The report is due next Friday.", WED, E("next Friday", "2023-05-26", alternatives=("2023-05-19",))),
    case("Let's start next Monday.", WED, E("next Monday", "2023-05-22")),
    case("The party is this Friday.", WED, E("this Friday", "2023-05-19")),
    case("The party was this Monday.", WED, E("this Monday", "2023-05-22", alternatives=(MON,))),
    case("I take lessons on Saturday mornings.", SAT),  # habitual
    # --- months
    case("I went to Paris in March.", SAT, E("in March", "2023-03-01", "2023-03-31",
                                             alternatives=(("2024-03-01", "2024-03-31"),))),
    case("I started in May.", SAT, E("in May", "2023-05-01", "2023-05-31")),
    case("I'm going to Tokyo in June.", SAT,
         E("in June", "2022-06-01", "2022-06-30", alternatives=(("2023-06-01", "2023-06-30"),))),
    case("We got married last May.", SAT, E("last May", "2022-05-01", "2022-05-31")),
    case("I quit smoking last March.", SAT, E("last March", "2023-03-01", "2023-03-31")),
    case("The wedding is this June.", SAT, E("this June", "2023-06-01", "2023-06-30")),
    case("I'll return next March.", SAT, E("next March", "2024-03-01", "2024-03-31")),
    case("I'll return next June.", SAT, E("next June", "2023-06-01", "2023-06-30")),
    case("I went there in early April.", SAT, E("in early April", "2023-04-01", "2023-04-10", approximate=True,
                                                alternatives=(("2024-04-01", "2024-04-10"),))),
    case("It started around mid-January.", SAT, E("mid-January", "2023-01-11", "2023-01-20", approximate=True,
                                                  alternatives=(("2024-01-11", "2024-01-20"),))),
    case("Since late February I've been sick.", SAT, E("late February", "2023-02-21", "2023-02-28", approximate=True,
                                                       alternatives=(("2024-02-21", "2024-02-29"),))),
    case("I visited in March of last year.", SAT, E("in March of last year", "2022-03-01", "2022-03-31")),
    case("I moved in may.", SAT, E("in may", "2023-05-01", "2023-05-31")),
    case("Opera 9 was released in May 2006.", SAT),  # explicit year: absolute, not relative
    case("It may be late; may I ask why?", SAT),  # the verb
    case("I started a journal on February 10th.", SAT,
         E("February 10th", "2023-02-10", alternatives=("2024-02-10",))),
    case("My race is on June 3rd.", SAT, E("June 3rd", "2022-06-03", alternatives=("2023-06-03",))),
    case("The party is on the 20th of May.", SAT, E("the 20th of May", SAT)),
    case("It was published March 15, 2023 online.", SAT),
    case("The festival runs May 1st to 8th.", SAT,
         E("May 1st to 8th", "2023-05-01", "2023-05-08", alternatives=(("2024-05-01", "2024-05-08"),))),
    case("The launch is on Friday, June 2.", SAT, E("on Friday, June 2", "2023-06-02")),
    case("Rates: Nov 22 4.1% Dec 22 4.2%", SAT),  # month and two-digit year in a table
    case("I cleaned the vase on the 15th of last month.", SAT, E("the 15th of last month", "2023-04-15")),
    case("I sold it on the 5th to 8th of December.", SAT,
         E("the 5th to 8th of December", "2022-12-05", "2022-12-08", alternatives=(("2023-12-05", "2023-12-08"),))),
    # --- holidays
    case("We had dinner on Valentine's Day.", SAT,
         E("Valentine's Day", "2023-02-14", alternatives=("2024-02-14",))),
    case("We had dinner on Valentine’s Day.", SAT,
         E("Valentine’s Day", "2023-02-14", alternatives=("2024-02-14",))),
    case("I saw them last Christmas.", SAT, E("last Christmas", "2022-12-25")),
    case("We'll host next Christmas.", SAT, E("next Christmas", "2023-12-25")),
    case("We'll host this Christmas.", SAT, E("this Christmas", "2023-12-25")),
    case("We went to mass on Christmas Eve.", SAT, E("Christmas Eve", "2022-12-24", alternatives=("2023-12-24",))),
    case("I got a gift card for Christmas.", SAT, E("for Christmas", "2022-12-25", alternatives=("2023-12-25",))),
    case("We bought a Christmas tree and shopped for Christmas gifts.", SAT),
    case("I wore heels on New Year's Eve.", SAT, E("New Year's Eve", "2022-12-31", alternatives=("2023-12-31",))),
    case("I wore heels on New Year’s Eve.", SAT, E("New Year’s Eve", "2022-12-31", alternatives=("2023-12-31",))),
    case("We hiked on New Year's Day.", SAT, E("New Year's Day", "2023-01-01", alternatives=("2024-01-01",))),
    case("I dressed up for Halloween.", SAT, E("for Halloween", "2022-10-31", alternatives=("2023-10-31",))),
    case("We went to Halloween Horror Nights.", SAT),
    case("The BBQ was on the Fourth of July.", SAT, E("the Fourth of July", "2022-07-04", alternatives=("2023-07-04",))),
    case("Happy Independence Day!", SAT, E("Independence Day", "2022-07-04", alternatives=("2023-07-04",))),
    case("The St. Patrick's Day market was fun.", SAT,
         E("St. Patrick's Day", "2023-03-17", alternatives=("2024-03-17",))),
    case("I've worn them since Christmas.", SAT, E("since Christmas", "2022-12-25")),
    case("I baked a pie for Thanksgiving.", SAT, E("for Thanksgiving", "2022-11-24", alternatives=("2023-11-23",))),
    case("The service on Easter Sunday was lovely.", SAT,
         E("Easter Sunday", "2023-04-09", alternatives=("2024-03-31",))),
    case("I got my mom flowers for Mother's Day.", SAT, E("Mother's Day", "2023-05-14", alternatives=("2024-05-12",))),
    case("We camped over Labor Day weekend.", SAT,
         E("Labor Day weekend", "2022-09-03", "2022-09-05", approximate=True,
           alternatives=(("2023-09-02", "2023-09-04"),))),
    case("I last played it around Christmas 2019.", SAT),
    case("I shopped on Black Friday last year.", SAT, E("on Black Friday last year", "2022-11-25")),
    case("Huge Black Friday deals!", SAT),
    # --- seasons
    case("We're going camping this summer.", SAT, E("this summer", "2023-06-01", "2023-08-31", approximate=True)),
    case("I learned to surf last summer.", SAT, E("last summer", "2022-06-01", "2022-08-31", approximate=True)),
    case("Maybe next summer.", SAT, E("next summer", "2023-06-01", "2023-08-31", approximate=True)),
    case("It snowed a lot this winter.", SAT, E("this winter", "2022-12-01", "2023-02-28", approximate=True)),
    case("I learned to surf last summer.", "2023-10-15",
         E("last summer", "2022-06-01", "2022-08-31", approximate=True,
           alternatives=(("2023-06-01", "2023-08-31"),))),
    # --- several expressions, in text order, longest match first
    case("Yesterday I finished the book I started three weeks ago, and next Friday I start another.", WED,
         E("Yesterday", "2023-05-16"), E("three weeks ago", "2023-04-26"),
         E("next Friday", "2023-05-26", alternatives=("2023-05-19",))),
    case("I went last week and again this past weekend; tomorrow I rest.", SAT,
         E("last week", "2023-05-08", "2023-05-14"), E("this past weekend", "2023-05-13", "2023-05-14"),
         E("tomorrow", SUN)),
    # --- never a date
    case("I recently moved and lately I've been tired.", SAT),
    case("What is your last name?", SAT),
    case("She was sitting next to me.", SAT),
    case("May I ask you something?", SAT),
    case("It was a while ago, the other day maybe.", SAT),
    case("I go to yoga on Sundays and every Friday.", SAT),
    case("On the last day of the trip we rested.", SAT),
    case("The last time I checked, it was fine.", SAT),
    case("We planned a weekend trip for the next day.", SAT),
    case("In today's world everything is online.", SAT),
    case("Read it in USA Today.", SAT),
)
