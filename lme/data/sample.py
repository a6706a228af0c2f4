"""A small synthetic dataset in the LongMemEval JSON format, bundled for tests and demos.

Every sentence here was written for this project; nothing comes from LongMemEval.
The generator is deterministic (a seeded `random.Random`, no wall clock, no
network, no locale): `python -m lme.data.sample` rewrites the committed file
`lme/data/sample_data/longmemeval_sample.json` byte for byte.

What the sample exercises:

- all six question types (at least five questions each) and abstention
  questions (`_abs` ids on four types, each keeping its base type), one
  integer answer;
- evidence sessions with `answer_` ids and `has_answer` turns (the assistant
  turn for single-session-assistant), filler sessions on everyday topics;
- knowledge updates (an old value, then a newer one in a later session),
  facts spread over two or three sessions, and relative time expressions
  ("yesterday", "two days ago", "two weeks ago", "this past Friday",
  "this past Monday", "last weekend", "last month") whose answers are computed
  from the session dates by the rules of the `_previous_weekday`,
  `_last_weekend` and `_last_month` helpers;
- file orders that are chronological, sorted by day only (times within a day
  out of order) or shuffled; exactly one history whose sessions all fall on one
  calendar day; one question dated earlier than the last session of its day.

Planted facts are sentences that share content words with their question and
hold the answer words, so an extractive reader can find them (multi-session
answers are aggregates over several such sentences).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any

SAMPLE_PATH: Path = Path(__file__).resolve().parent / "sample_data" / "longmemeval_sample.json"

WEEKDAY_ABBREVIATIONS: tuple[str, ...] = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
WEEKDAY_NAMES: tuple[str, ...] = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
MONTH_NAMES: tuple[str, ...] = (
    "January", "February", "March", "April", "May", "June",
    "July", "August", "September", "October", "November", "December",
)  # fmt: skip

NOT_ENOUGH = "The information provided is not enough."


def format_lme_date(moment: datetime) -> str:
    """`2023/05/20 (Sat) 02:21`, with English weekday names whatever the locale."""
    weekday = WEEKDAY_ABBREVIATIONS[moment.weekday()]
    return f"{moment.year:04d}/{moment.month:02d}/{moment.day:02d} ({weekday}) {moment.hour:02d}:{moment.minute:02d}"


def _long_date(day: date) -> str:
    """`Monday, March 6, 2023`."""
    return f"{WEEKDAY_NAMES[day.weekday()]}, {MONTH_NAMES[day.month - 1]} {day.day}, {day.year}"


def _short_date(day: date) -> str:
    """`March 6, 2023`."""
    return f"{MONTH_NAMES[day.month - 1]} {day.day}, {day.year}"


def _previous_weekday(day: date, weekday: int) -> date:
    """The latest `weekday` (Monday = 0) strictly before `day` ("this past Friday")."""
    return day - timedelta(days=(day.weekday() - weekday - 1) % 7 + 1)


def _last_weekend(day: date) -> tuple[date, date]:
    """Saturday and Sunday of the latest weekend that ended before `day` ("last weekend")."""
    sunday = _previous_weekday(day, 6)
    return sunday - timedelta(days=1), sunday


def _last_month(day: date) -> tuple[int, int]:
    """(year, month) of the calendar month before `day`'s ("last month")."""
    previous = day.replace(day=1) - timedelta(days=1)
    return previous.year, previous.month


# ---------------------------------------------------------------------------
# Filler chat: everyday topics, each a few (user, assistant) exchanges.

FILLER_TOPICS: tuple[tuple[tuple[str, str], ...], ...] = (
    (  # bread baking
        ("Why does my homemade bread come out so dense?",
         "Dense bread usually means the dough was under-proofed or the flour was low in protein. Try a longer rise in a warm spot and use bread flour."),
        ("Can I freeze bread dough after the first rise?",
         "Yes. Shape it, wrap it tightly and freeze it for up to a month, then thaw it overnight in the fridge before baking."),
        ("What does scoring the loaf actually do?",
         "Scoring gives steam a planned place to escape, so the loaf expands evenly instead of tearing at random."),
        ("Is a Dutch oven really necessary for a crusty loaf?",
         "It helps because it traps steam, but a baking stone plus a tray of hot water on the lower rack works well too."),
    ),
    (  # balcony herbs
        ("My basil keeps wilting on the balcony. What am I doing wrong?",
         "Basil wilts when the pot dries out in strong afternoon sun. Water deeply in the morning and give it some shade at midday."),
        ("Which herbs grow well together in one planter?",
         "Thyme, rosemary and oregano all like dry soil, so they share a pot well. Keep mint on its own because it spreads fast."),
        ("How often should I feed potted herbs?",
         "Every three to four weeks with a diluted liquid feed is plenty; too much makes the leaves less tasty."),
        ("What is the best way to harvest parsley?",
         "Cut the outer stems near the base first and leave the inner ones to keep growing."),
    ),
    (  # budgeting
        ("What is a simple way to start a monthly budget?",
         "List your fixed costs first, then set caps for groceries, transport and fun, and track every purchase for a month."),
        ("Is the 50/30/20 rule realistic?",
         "It is a useful starting point: half for needs, 30% for wants, 20% for savings. Adjust the split if rent is high where you live."),
        ("How big should an emergency fund be?",
         "A common target is three to six months of essential costs, kept in an easy-access savings account."),
        ("Any tips for cutting subscription costs?",
         "Scan your bank statement for recurring charges, cancel what you have not used lately and rotate streaming services."),
    ),
    (  # home repair
        ("How do I fix a dripping kitchen tap?",
         "Turn off the water supply, remove the handle and replace the worn washer or cartridge. Bring the old part to the shop to match it."),
        ("What is the easiest way to patch a small hole in plasterboard?",
         "Use a self-adhesive mesh patch, cover it with two thin coats of filler, sand it smooth and paint over it."),
        ("Why does my bathroom door stick in summer?",
         "Wood swells with humidity. Tighten the hinge screws first; if it still sticks, sand the edge lightly and seal it."),
        ("How can I quiet a squeaky floorboard?",
         "Talcum powder in the joints is a quick fix; a screw through the board into the joist below lasts longer."),
    ),
    (  # packing light
        ("How do I pack a week of clothes into a carry-on?",
         "Pick a simple colour palette so everything mixes, roll soft items, wear your bulkiest shoes and use packing cubes."),
        ("What should always go in my personal item on a flight?",
         "Medication, chargers, a change of underwear, your documents and anything valuable or fragile."),
        ("Is travel insurance worth it for short trips?",
         "If the trip is expensive and non-refundable, or you need medical cover abroad, it usually pays for itself."),
    ),
    (  # coffee
        ("What grind size should I use for a French press?",
         "Use a coarse grind, about like sea salt, and steep for four minutes before pressing slowly."),
        ("Why does my espresso taste sour?",
         "Sour espresso is usually under-extracted. Grind a little finer or let the shot run a few seconds longer."),
        ("How should I store coffee beans?",
         "Keep them in an airtight, opaque container at room temperature and buy what you will use within two or three weeks."),
        ("Is cold brew less acidic than hot coffee?",
         "Generally yes: cold water pulls out fewer of the sharp compounds, which is why cold brew tastes smoother."),
    ),
    (  # desk posture
        ("My neck gets stiff from working at a laptop all day. Any advice?",
         "Raise the screen to eye level, use an external keyboard and take a short break every half hour."),
        ("Is a standing desk worth buying?",
         "It can help if you alternate: stand for twenty or thirty minutes, then sit. Standing all day brings its own aches."),
        ("How high should my desk chair be?",
         "Your feet should rest flat on the floor with your knees at roughly a right angle and your elbows level with the desk."),
    ),
    (  # playlists
        ("How should I organise my music playlists?",
         "Group them by activity rather than genre, such as focus, cooking and driving, and prune songs you always skip."),
        ("What makes a good playlist for a dinner party?",
         "Start mellow, build gently as people arrive and keep the volume low enough for conversation."),
        ("How do I find new artists similar to ones I like?",
         "Check the related-artists section of your streaming service, follow small labels and read festival line-ups."),
    ),
    (  # vocabulary
        ("How many new words a day is realistic when learning a language?",
         "Ten to fifteen new words a day is sustainable if you review them with spaced repetition."),
        ("Are flashcard apps better than paper cards?",
         "Apps schedule reviews for you, but writing cards by hand helps some people remember. Either works if you review daily."),
        ("How can I practise speaking without a partner?",
         "Shadow short audio clips, describe what you are doing out loud and record yourself to compare."),
    ),
    (  # meal prep
        ("How long do cooked grains keep in the fridge?",
         "Cooked rice and other grains keep for about four days in a sealed box; cool them quickly before chilling."),
        ("What meal prep lunches do not get soggy?",
         "Grain bowls with the dressing packed separately, roasted vegetables and sturdy cabbage salads hold up well."),
        ("Can I freeze soup in glass jars?",
         "Yes, if you leave a few centimetres of headspace and let the soup cool completely first."),
    ),
    (  # phones and laptops
        ("Why does my phone battery drain so fast these days?",
         "Check which apps use the most battery in settings; background location and a bright screen are common culprits."),
        ("Should I let my phone battery run down to zero before charging?",
         "No, lithium batteries prefer staying between about 20% and 80%; full discharges wear them faster."),
        ("How do I free up storage on my laptop?",
         "Empty the downloads folder, remove apps you never open and move old photos to an external drive."),
        ("Is it safe to use public Wi-Fi?",
         "For casual browsing it is fine, but avoid banking sites on shared networks or use a VPN."),
    ),
    (  # sleep
        ("I keep waking up at 3 am. What could help?",
         "Keep the room cool and dark, avoid screens before bed and get up at the same time every day."),
        ("Is it bad to drink coffee in the afternoon?",
         "Caffeine lingers for hours, so an afternoon cup can still affect your sleep. Try stopping by early afternoon."),
        ("Do white noise machines actually work?",
         "For many people they mask sudden sounds like traffic, which helps them stay asleep."),
    ),
    (  # car care
        ("How often should I check my tyre pressure?",
         "Once a month and before long drives, with the tyres cold. The right pressure is on a sticker inside the driver's door."),
        ("What does the orange engine light mean?",
         "It is the check-engine light. If it stays steady, get the code read soon; if it flashes, stop driving."),
        ("How can I keep my windscreen from fogging up?",
         "Run the air conditioning with the heat, switch off recirculation and keep the inside of the glass clean."),
    ),
    (  # decluttering
        ("Where do I even start with decluttering my flat?",
         "Start with one small area, like a single drawer, and sort things into keep, donate and recycle."),
        ("How do I keep my wardrobe organised?",
         "Hang things by type and colour, fold knitwear so it keeps its shape and turn hangers around to spot what you never wear."),
        ("What can I do with old cables and chargers?",
         "Label the ones you still use and take the rest to an electronics recycling point."),
    ),
    (  # film nights
        ("How do we pick a film when my friends can never agree?",
         "Everyone suggests one title, then vote in rounds and drop the least popular each time."),
        ("How do I make a home movie night feel special?",
         "Dim the lights, make popcorn with a fun seasoning and put phones in a basket until the credits."),
        ("Are old black-and-white films worth watching?",
         "Many hold up well; comedies and thrillers tend to feel less dated than slow dramas."),
    ),
    (  # hosting
        ("How far ahead should I send party invitations?",
         "Two to three weeks ahead is standard for a casual party; allow four around the holidays."),
        ("What party snacks can I make the day before?",
         "Dips, marinated olives, cheese straws and pasta salads all keep well overnight in the fridge."),
        ("How do I politely ask guests not to bring gifts?",
         "A short line on the invitation, such as 'your company is the only gift we need', is clear and friendly."),
    ),
    (  # laundry
        ("How do I get a grass stain out of jeans?",
         "Rub a little liquid detergent into the stain, wait fifteen minutes and wash warm. Skip the dryer until it is gone."),
        ("Why do my towels feel stiff after washing?",
         "Too much detergent leaves residue. Use less, add some white vinegar to the rinse and skip fabric softener."),
        ("Can wool jumpers go in the washing machine?",
         "Only on a wool or hand-wash cycle in cold water, then dry them flat so they keep their shape."),
    ),
)


# ---------------------------------------------------------------------------
# Question specifications.


@dataclass(frozen=True)
class _Pair:
    """A user message and the assistant's reply; `evidence` names the turn holding the fact."""

    user: str
    assistant: str
    evidence: str | None = "user"  # "user", "assistant" or None


@dataclass(frozen=True)
class _Context:
    moments: tuple[datetime, ...]  # the evidence sessions' dates, chronological
    question_date: datetime


class _Retry(Exception):
    """The drawn dates make the question ambiguous: draw again."""


_Make = Callable[[_Context], tuple["str | int", list[list[_Pair]]]]


@dataclass(frozen=True)
class _Spec:
    key: str
    question_type: str
    question: str
    sessions: int  # number of evidence sessions
    make: _Make
    abstention_of: str | None = None
    layout: str = ""  # "", "same_day" or "early_question"


def _fixed(answer: str | int, *sessions: Sequence[_Pair]) -> _Make:
    return lambda ctx: (answer, [list(session) for session in sessions])


def _cleared(sessions: list[list[_Pair]]) -> list[list[_Pair]]:
    return [[replace(pair, evidence=None) for pair in session] for session in sessions]


def _abstention(base: _Spec, question: str, answer: str) -> _Spec:
    """An unanswerable variant of `base`: same related facts, none of them holding the answer."""

    def make(ctx: _Context) -> tuple[str | int, list[list[_Pair]]]:
        return answer, _cleared(base.make(ctx)[1])

    return _Spec(base.key + "_abs", base.question_type, question, base.sessions, make, abstention_of=base.key)


def _day(ctx: _Context, index: int) -> date:
    return ctx.moments[index].date()


def _days(count: int) -> str:
    return "1 day" if count == 1 else f"{count} days"


# single-session-user --------------------------------------------------------

SSU_DOG = _Spec(
    "ssu_dog", "single-session-user", "What breed is my neighbour's dog that I walk on weekends?", 1,
    _fixed("beagle", [_Pair(
        "I walk my neighbour's dog on weekends, a cheerful beagle named Biscuit. How do I stop him pulling on the lead?",
        "Stop whenever the lead goes tight and move on only when it is slack. Beagles follow their nose, so short sniffing breaks make good rewards.",
    )]),
)
SSU_BOOTS = _Spec(
    "ssu_boots", "single-session-user", "Where did I buy my new hiking boots?", 1,
    _fixed("Ridgeline Outfitters", [_Pair(
        "I bought my new hiking boots at Ridgeline Outfitters and they still feel stiff. How long does it take to break them in?",
        "Usually one to two weeks of short walks. Wear them around the house first with your hiking socks, then build up to longer outings.",
    )]),
)
SSU_CELLO = _Spec(
    "ssu_cello", "single-session-user", "What instrument did I start learning at the community centre?", 1,
    _fixed("The cello", [_Pair(
        "I started learning the cello at the community centre on Tuesday evenings. How often should a beginner practise?",
        "Twenty to thirty minutes a day beats one long session a week. Work on open strings and bow control before pieces.",
    )]),
)
SSU_BAKERY = _Spec(
    "ssu_bakery", "single-session-user", "What is the name of my sister's bakery?", 1,
    _fixed("Crumb and Crust", [_Pair(
        "My sister's bakery is called Crumb and Crust, and she wants more people to find it. Any ideas for a cheap promotion?",
        "A loyalty card, a weekly special announced online and a tray of samples by the door are all low-cost ways to bring people in.",
    )]),
)
SSU_OFFICE = _Spec(
    "ssu_office", "single-session-user", "What colour did I paint my home office?", 1,
    _fixed("Sage green", [_Pair(
        "I painted my home office a soft sage green, and now I need curtains. What colours go with it?",
        "Sage green pairs nicely with warm white, oatmeal linen or a muted terracotta if you want some contrast.",
    )]),
    layout="same_day",
)
SSU_COMMUTE = _Spec(
    "ssu_commute", "single-session-user", "How long is my daily train commute to work?", 1,
    _fixed("45 minutes each way", [_Pair(
        "My daily train commute to work is 45 minutes each way, and I want to use the time better. Any suggestions?",
        "You could listen to audiobooks, plan your day in a notes app or practise a language with short lessons that fit the ride.",
    )]),
)

# single-session-assistant ---------------------------------------------------

SSA_SQUASH = _Spec(
    "ssa_squash", "single-session-assistant", "What temperature did you tell me to roast the butternut squash at?", 1,
    _fixed("200°C (about 400°F)", [_Pair(
        "I picked up a butternut squash at the market. How should I cook it?",
        "Cut it into cubes and toss them with olive oil and salt. Roast the butternut squash at 200°C (about 400°F) for 35 to 40 minutes, until the edges caramelise.",
        "assistant",
    )]),
)
SSA_STRETCH = _Spec(
    "ssa_stretch", "single-session-assistant", "Which stretch did you recommend for my tight hamstrings after running?", 1,
    _fixed("The standing forward fold", [_Pair(
        "My legs always feel tight after running. What should I do?",
        "For tight hamstrings after running, I recommend the standing forward fold. Hold it for 30 seconds, breathe slowly and bend your knees a little if needed.",
        "assistant",
    )]),
    layout="early_question",
)
SSA_BOARDGAME = _Spec(
    "ssa_boardgame", "single-session-assistant", "Which board game did you suggest for my family game night?", 1,
    _fixed("Ticket to Ride", [_Pair(
        "We're hosting a family game night with kids aged eight to twelve. Any ideas?",
        "For your family game night, I suggest the board game Ticket to Ride: the rules take five minutes to learn and it works well for ages eight and up.",
        "assistant",
    )]),
)
SSA_RICE = _Spec(
    "ssa_rice", "single-session-assistant", "How much water did you say to use per cup of jasmine rice?", 1,
    _fixed("1.5 cups of water per cup of rice", [_Pair(
        "My jasmine rice always turns out mushy. What am I doing wrong?",
        "Rinse the rice first, then use 1.5 cups of water per cup of jasmine rice. Let it rest covered for ten minutes after cooking.",
        "assistant",
    )]),
)
SSA_SNAKEPLANT = _Spec(
    "ssa_snakeplant", "single-session-assistant", "How often did you recommend watering my snake plant?", 1,
    _fixed("About once every two to three weeks", [_Pair(
        "I got a snake plant for my bedroom. How do I look after it?",
        "I recommend watering your snake plant about once every two to three weeks, letting the soil dry out completely in between, and even less often in winter.",
        "assistant",
    )]),
)
SSA_SPANISH = _Spec(
    "ssa_spanish", "single-session-assistant", "Which Spanish tense did you say I should learn after the present tense?", 1,
    _fixed("The preterite", [_Pair(
        "I'm comfortable with the Spanish present tense now. What next?",
        "After the present tense, you should learn the preterite tense, because it lets you talk about finished actions in the past.",
        "assistant",
    )]),
)

# single-session-preference --------------------------------------------------

SSP_DINNER = _Spec(
    "ssp_dinner", "single-session-preference", "Can you suggest a dinner recipe I could cook this weekend?", 1,
    _fixed(
        "The user would prefer a vegetarian dinner recipe with spicy Thai flavours, such as a red curry or a spicy noodle dish. "
        "They might not prefer recipes with meat or fish, or mild dishes without heat.",
        [_Pair(
            "For any dinner recipe, keep in mind that I only cook vegetarian meals and I love spicy Thai flavours. What should I keep in my pantry?",
            "Stock dried red chillies, lemongrass paste, kaffir lime leaves and a good vegetarian curry paste; soy sauce stands in for fish sauce.",
        )],
    ),
)
SSP_PODCAST = _Spec(
    "ssp_podcast", "single-session-preference", "Can you recommend a podcast for my commute?", 1,
    _fixed(
        "The user would prefer history podcasts, especially ones about ancient Rome, in episodes that fit a commute. "
        "They would not prefer true crime podcasts.",
        [_Pair(
            "On my commute I like a podcast about history, especially ancient Rome, but I can't stand true crime. How do I keep track of episodes?",
            "Most podcast apps have a queue; you could also keep a short list in your notes app sorted by topic.",
        )],
    ),
)
SSP_HOTEL = _Spec(
    "ssp_hotel", "single-session-preference", "Can you recommend a hotel for my trip to Lisbon?", 1,
    _fixed(
        "The user would prefer a small boutique hotel in a walkable old neighbourhood, for example in Alfama or Chiado. "
        "They would not prefer large chain hotels or places far from the historic centre.",
        [_Pair(
            "For any trip I prefer a small boutique hotel in a walkable old neighbourhood rather than a big chain hotel. Is it cheaper to book directly?",
            "Often it is, or the hotel will match the price and add breakfast. A short email before booking is worth it.",
        )],
    ),
)
SSP_WORKOUT = _Spec(
    "ssp_workout", "single-session-preference", "Any ideas for a morning workout I can do at home?", 1,
    _fixed(
        "The user would prefer a quiet, low-impact home workout that uses their pair of 5 kg dumbbells, such as a slow strength circuit or yoga. "
        "They might not prefer jumping exercises or routines that need a gym.",
        [_Pair(
            "My morning workout at home has to be quiet and low-impact because of my downstairs neighbours, and I only have a pair of 5 kg dumbbells. Before or after breakfast?",
            "Either works; if you train first thing, a small snack like a banana can help.",
        )],
    ),
)
SSP_GIFT = _Spec(
    "ssp_gift", "single-session-preference", "What should I get my dad for his birthday?", 1,
    _fixed(
        "The user would prefer a practical birthday gift tied to their dad's woodworking or birdwatching, such as good chisels, "
        "a bird feeder kit or binoculars. They would not prefer another gadget.",
        [_Pair(
            "My dad loves woodworking and birdwatching, and for his birthday I want to get him something practical, not another gadget. When should I start planning?",
            "A month ahead leaves time to order something handmade or personalised without rushing.",
        )],
    ),
)
SSP_BOOK = _Spec(
    "ssp_book", "single-session-preference", "Can you suggest a book to read on my holiday?", 1,
    _fixed(
        "The user would prefer a light, cosy mystery book for the holiday, in the style of Agatha Christie. "
        "They would not prefer grim or dark thrillers.",
        [_Pair(
            "On holiday I like to read a light, cosy mystery book, something like Agatha Christie, and nothing grim. E-reader or paperbacks?",
            "An e-reader saves space, but paperbacks never run out of battery at the beach.",
        )],
    ),
)

# multi-session --------------------------------------------------------------

MS_BIRDS = _Spec(
    "ms_birds", "multi-session", "How many bird species have I spotted at my garden feeder?", 2,
    _fixed(
        3,
        [_Pair(
            "I spotted a goldfinch at my garden feeder this morning. What seeds do they like?",
            "Goldfinches love nyjer seed and sunflower hearts; a tube feeder with small ports suits them best.",
        )],
        [_Pair(
            "Two more bird species showed up at my garden feeder: a nuthatch and a bullfinch. Will they scare off the goldfinch?",
            "Unlikely. They feed in different ways, so a busy feeder usually means more visitors, not fewer.",
        )],
    ),
)
MS_BIKE = _Spec(
    "ms_bike", "multi-session", "How much did I spend in total on my new bike and the helmet?", 2,
    _fixed(
        "$510 ($450 for the bike and $60 for the helmet)",
        [_Pair(
            "I spent $450 on my new bike from the local shop. What basic maintenance should I do?",
            "Keep the chain clean and lightly oiled, check the tyre pressure weekly and have the brakes checked every few months.",
        )],
        [_Pair(
            "I spent $60 on a helmet to go with my new bike. How do I know it fits?",
            "It should sit level, about two fingers above your eyebrows, and not move when you shake your head with the strap fastened.",
        )],
    ),
)
MS_SHELTER = _Spec(
    "ms_shelter", "multi-session", "How many hours did I volunteer at the animal shelter in total?", 2,
    _fixed(
        "7 hours",
        [_Pair(
            "I volunteered at the animal shelter for 4 hours, mostly walking dogs. How do I handle a dog that is nervous on the lead?",
            "Move slowly, let the dog set the pace and reward calm behaviour. Quiet routes help too.",
        )],
        [_Pair(
            "I volunteered at the animal shelter for another 3 hours, cleaning the cat rooms. Is it normal for shelter cats to hide?",
            "Very normal; a hiding spot helps them feel safe. Sitting quietly nearby builds trust over time.",
        )],
    ),
)
MS_WORKTRIPS = _Spec(
    "ms_worktrips", "multi-session", "Which countries have I visited on work trips?", 3,
    _fixed(
        "Canada, Japan and Mexico",
        [_Pair(
            "My work trip to Canada went well, although Toronto was freezing. How do I keep my travel expenses tidy?",
            "Photograph every receipt the same day and note what it was for; most expense apps read the amount from the photo.",
        )],
        [_Pair(
            "I just got back from a work trip to Japan and the jet lag is rough. How long will it last?",
            "Roughly a day per time zone crossed, though morning daylight speeds it up.",
        )],
        [_Pair(
            "My latest work trip was to Mexico, and I loved the food in Mexico City. How do I make salsa verde?",
            "Roast tomatillos, a jalapeño, garlic and onion, then blend them with coriander, lime and salt.",
        )],
    ),
)
MS_READING = _Spec(
    "ms_reading", "multi-session", "How many books have I finished for my reading challenge?", 3,
    _fixed(
        "4 books",
        [_Pair(
            "I finished two books for my reading challenge: a biography of Marie Curie and a novel set in Iceland. How should I keep notes?",
            "A simple reading journal works: title, date finished, three ideas worth remembering and a rating.",
        )],
        [_Pair(
            "I finished another book for my reading challenge, a short history of tea. How do I pick the next one?",
            "Alternate fiction and non-fiction, or choose a theme for each month to keep things fresh.",
        )],
        [_Pair(
            "One more book finished for my reading challenge, a collection of essays about walking. Should I set a bigger goal?",
            "If the pace feels easy, raising the goal a little keeps it motivating without turning reading into a chore.",
        )],
    ),
)
MS_RACES = _Spec(
    "ms_races", "multi-session", "What is the total distance of the races I ran?", 2,
    _fixed(
        "31.1 km (a 10 km race and a 21.1 km half marathon)",
        [_Pair(
            "I ran a 10 km race in the park and finished feeling strong. What should I eat after a race?",
            "A mix of carbohydrates and protein within an hour helps, such as yoghurt with fruit or a sandwich.",
        )],
        [_Pair(
            "I ran my first half marathon race, the full 21.1 km, and my legs are sore. How long should I rest?",
            "Take a few easy days of walking or gentle cycling and wait about a week before running hard again.",
        )],
    ),
)

# knowledge-update -----------------------------------------------------------

KU_5K = _Spec(
    "ku_5k", "knowledge-update", "What is my current personal best for the 5K run?", 2,
    _fixed(
        "25 minutes 52 seconds",
        [_Pair(
            "My personal best for the 5K run is 27 minutes 40 seconds, and I want to get faster. Should I add intervals?",
            "Yes, one interval session a week, such as six fast 400-metre repeats, is a great way to improve.",
        )],
        [_Pair(
            "I set a new personal best for the 5K run: 25 minutes 52 seconds! How do I keep improving?",
            "Congratulations! Keep one interval session and one long easy run each week, with rest between hard days.",
        )],
    ),
)
KU_JOB = _Spec(
    "ku_job", "knowledge-update", "Where do I work now?", 2,
    _fixed(
        "Harbour General Hospital",
        [_Pair(
            "I work as a nurse at Riverside Clinic and the shifts are long. Any tips for staying energised?",
            "Pack snacks with protein, drink water steadily and take your breaks away from the ward if you can.",
        )],
        [_Pair(
            "I switched jobs, so I now work as a nurse at Harbour General Hospital. How do I make a good impression?",
            "Ask questions, learn names quickly and volunteer for tasks; people remember a reliable newcomer.",
        )],
    ),
)
KU_STEPS = _Spec(
    "ku_steps", "knowledge-update", "What is my daily step goal?", 2,
    _fixed(
        "10,000 steps",
        [_Pair(
            "My daily step goal is 8,000 steps, which I usually reach by walking at lunch. Is that enough?",
            "It is a solid target; walking that much most days brings real health benefits.",
        )],
        [_Pair(
            "I raised my daily step goal to 10,000 steps. How can I fit in the extra walking?",
            "Get off the bus a stop early, take phone calls on foot and add a short walk after dinner.",
        )],
    ),
)
KU_CATTOY = _Spec(
    "ku_cattoy", "knowledge-update", "What is my cat's favourite toy?", 2,
    _fixed(
        "A feather wand",
        [_Pair(
            "My cat's favourite toy is a crinkly paper ball; she bats it around for hours. Is it safe?",
            "It is fine as long as she does not chew and swallow pieces; replace it when it falls apart.",
        )],
        [_Pair(
            "My cat's favourite toy is now a feather wand, and she ignores the paper ball completely. How long should we play?",
            "Two or three sessions of ten to fifteen minutes a day suit most cats; end with a catch so she feels satisfied.",
        )],
    ),
)
KU_TOMATOES = _Spec(
    "ku_tomatoes", "knowledge-update", "How many tomato plants am I growing in my garden?", 2,
    _fixed(
        "Nine",
        [_Pair(
            "I'm growing six tomato plants in my garden this year. How far apart should they be?",
            "Space them about 45 to 60 centimetres apart so air moves between them and the leaves dry quickly.",
        )],
        [_Pair(
            "I added three cherry tomato seedlings, so I'm growing nine tomato plants in my garden now. Do they need support?",
            "Yes, most cherry varieties sprawl, so a cage or a tall stake keeps the fruit off the ground.",
        )],
    ),
)
KU_CLASS = _Spec(
    "ku_class", "knowledge-update", "What time does my Spanish class start?", 2,
    _fixed(
        "7:30 pm",
        [_Pair(
            "My Spanish class starts at 6 pm on Wednesdays, straight after work. How can I stay focused when I'm tired?",
            "Have a snack beforehand, sit near the front and reread the last lesson's notes on the way.",
        )],
        [_Pair(
            "My Spanish class moved to a later slot, so it starts at 7:30 pm now. What can I do with the extra time?",
            "You could fit in a short walk or cook dinner first, so you arrive relaxed and fed.",
        )],
    ),
)

# temporal-reasoning ---------------------------------------------------------


def _make_dentist(ctx: _Context) -> tuple[str | int, list[list[_Pair]]]:
    dentist = _day(ctx, 0) - timedelta(days=1)  # "yesterday"
    eye_exam = _day(ctx, 1) - timedelta(days=2)  # "two days ago"
    gap = (eye_exam - dentist).days
    if gap <= 0:
        raise _Retry
    answer = f"{_days(gap)}. The dentist appointment was on {_short_date(dentist)} and the eye exam on {_short_date(eye_exam)}."
    return answer, [
        [_Pair(
            "I had my dentist appointment yesterday and got a filling replaced. When can I eat something crunchy?",
            "Most fillings set quickly, but give it a day if the area is sore and chew on the other side for now.",
        )],
        [_Pair(
            "I had my eye exam two days ago and my prescription changed slightly. Should I replace my glasses right away?",
            "If your eyes feel strained, yes; for a small change you can wait until the current lenses get scratched.",
        )],
    ]


def _make_workshop(ctx: _Context) -> tuple[str | int, list[list[_Pair]]]:
    pottery = _day(ctx, 0) - timedelta(days=1)  # "yesterday"
    workshop = _day(ctx, 1) - timedelta(days=14)  # "two weeks ago"
    if pottery == workshop:
        raise _Retry
    if workshop < pottery:
        answer = (
            f"The cooking workshop (around {_short_date(workshop)}) came first, "
            f"before the pottery class on {_short_date(pottery)}."
        )
    else:
        answer = (
            f"The pottery class (on {_short_date(pottery)}) came first, "
            f"before the cooking workshop around {_short_date(workshop)}."
        )
    return answer, [
        [_Pair(
            "I took a pottery class yesterday and made a slightly lopsided mug. How do I keep the walls even?",
            "Brace your hands together and pull the clay up slowly at a steady wheel speed; even pressure gives even walls.",
        )],
        [_Pair(
            "I went to a cooking workshop two weeks ago and learned to make fresh pasta. What sauce suits tagliatelle?",
            "A simple butter and sage sauce or a slow-cooked ragù both cling nicely to wide ribbons like tagliatelle.",
        )],
    ]


def _make_library(ctx: _Context) -> tuple[str | int, list[list[_Pair]]]:
    started = _previous_weekday(_day(ctx, 0), 0)  # "this past Monday"
    days = (ctx.question_date.date() - started).days
    weeks, rest = divmod(days, 7)
    span = f"{weeks} weeks" if rest == 0 else f"{weeks} weeks and {_days(rest)}"
    answer = f"{span} ago: the new job at the library started on {_long_date(started)}, {days} days before the question date."
    return answer, [
        [_Pair(
            "I started my new job at the library this past Monday, shelving books and running the front desk. How do I remember the regulars' names?",
            "Repeat each name when you greet someone and jot quick notes after your shift; they stick within a couple of weeks.",
        )],
    ]


def _make_camping(ctx: _Context) -> tuple[str | int, list[list[_Pair]]]:
    kitten = _day(ctx, 0) - timedelta(days=1)  # "yesterday"
    if _day(ctx, 1).weekday() >= 5:  # "last weekend" said on a weekend is ambiguous
        raise _Retry
    saturday, sunday = _last_weekend(_day(ctx, 1))
    weekend = f"the weekend of {_short_date(saturday)}"
    if kitten < saturday:
        answer = f"Adopting the kitten came first ({_short_date(kitten)}), before the camping trip at Lake Marrow on {weekend}."
    elif kitten > sunday:
        answer = f"The camping trip at Lake Marrow came first ({weekend}), before adopting the kitten on {_short_date(kitten)}."
    else:
        raise _Retry
    return answer, [
        [_Pair(
            "I adopted my kitten yesterday, a tiny grey tabby called Pepper. What should I buy for her first week?",
            "A litter tray, kitten food, a scratching post, a cosy bed and a couple of safe toys are enough to start.",
        )],
        [_Pair(
            "I went on a camping trip at Lake Marrow last weekend and the stars were amazing. How do I stop my sleeping bag smelling musty?",
            "Air it out fully when you get home and store it loose in a large cotton sack rather than compressed.",
        )],
    ]


def _make_funrun(ctx: _Context) -> tuple[str | int, list[list[_Pair]]]:
    year, month = _last_month(_day(ctx, 0))  # "last month"
    return f"{MONTH_NAMES[month - 1]} {year}", [
        [_Pair(
            "I ran the charity fun run last month and raised money for the children's hospital. How can I thank my sponsors?",
            "A short personal message with the total raised and a photo from the day makes a lovely thank-you.",
        )],
    ]


def _make_office(ctx: _Context) -> tuple[str | int, list[list[_Pair]]]:
    landed = _previous_weekday(_day(ctx, 0), 4)  # "this past Friday"
    back = _day(ctx, 1) - timedelta(days=1)  # "yesterday"
    gap = (back - landed).days
    if gap <= 0:
        raise _Retry
    answer = f"{_days(gap)}. The flight home landed on {_long_date(landed)} and I went back to the office on {_long_date(back)}."
    return answer, [
        [_Pair(
            "My flight home from Athens landed this past Friday, and I'm still unpacking. How do I get sand out of a suitcase lining?",
            "Vacuum it with a brush attachment, wipe the lining with a damp cloth and leave the case open to dry.",
        )],
        [_Pair(
            "I went back to the office yesterday after working from home for a long stretch. How do I get used to commuting again?",
            "Pack your bag the night before and leave some slack in the morning during the first week.",
        )],
    ]


def _make_recital(ctx: _Context) -> tuple[str | int, list[list[_Pair]]]:
    recital = _day(ctx, 0) - timedelta(days=1)  # "yesterday"
    return f"{WEEKDAY_NAMES[recital.weekday()]} ({_short_date(recital)})", [
        [_Pair(
            "My piano recital was yesterday and I only missed one note. How do I keep my nerves down next time?",
            "Practise performing for friends, breathe slowly before you start and focus on the music, not the audience.",
        )],
    ]


TR_DENTIST = _Spec(
    "tr_dentist", "temporal-reasoning", "How many days passed between my dentist appointment and my eye exam?", 2, _make_dentist
)
TR_WORKSHOP = _Spec(
    "tr_workshop", "temporal-reasoning", "Which did I do first, the pottery class or the cooking workshop?", 2, _make_workshop
)
TR_LIBRARY = _Spec(
    "tr_library", "temporal-reasoning", "How many weeks ago did I start my new job at the library?", 1, _make_library
)
TR_CAMPING = _Spec(
    "tr_camping", "temporal-reasoning", "Which came first, my camping trip at Lake Marrow or adopting my kitten?", 2, _make_camping
)
TR_FUNRUN = _Spec("tr_funrun", "temporal-reasoning", "In which month did I run the charity fun run?", 1, _make_funrun)
TR_OFFICE = _Spec(
    "tr_office", "temporal-reasoning", "How many days after my flight home landed did I go back to the office?", 2, _make_office
)
TR_RECITAL = _Spec("tr_recital", "temporal-reasoning", "On what day of the week was my piano recital?", 1, _make_recital)

# abstention -----------------------------------------------------------------

ABS_DOG = _abstention(
    SSU_DOG, "What breed is my neighbour's cat that I feed on weekends?",
    f"{NOT_ENOUGH} You mentioned walking your neighbour's beagle on weekends but not feeding a cat.",
)
ABS_SQUASH = _abstention(
    SSA_SQUASH, "What temperature did you tell me to roast the sweet potatoes at?",
    f"{NOT_ENOUGH} You asked how to cook a butternut squash but not sweet potatoes.",
)
ABS_SHELTER = _abstention(
    MS_SHELTER, "How many hours did I volunteer at the food bank in total?",
    f"{NOT_ENOUGH} You mentioned volunteering at the animal shelter but not at a food bank.",
)
ABS_5K = _abstention(
    KU_5K, "What is my current personal best for the marathon?",
    f"{NOT_ENOUGH} You mentioned your personal best for the 5K run but not for a marathon.",
)
ABS_DENTIST = _abstention(
    TR_DENTIST, "How many days passed between my dentist appointment and my MRI scan?",
    f"{NOT_ENOUGH} You mentioned your dentist appointment and your eye exam but not an MRI scan.",
)

SPECS: tuple[_Spec, ...] = (
    SSU_DOG, ABS_DOG, SSU_BOOTS, SSU_CELLO, SSU_BAKERY, SSU_OFFICE, SSU_COMMUTE,
    SSA_SQUASH, ABS_SQUASH, SSA_STRETCH, SSA_BOARDGAME, SSA_RICE, SSA_SNAKEPLANT, SSA_SPANISH,
    SSP_DINNER, SSP_PODCAST, SSP_HOTEL, SSP_WORKOUT, SSP_GIFT, SSP_BOOK,
    MS_BIRDS, MS_BIKE, MS_SHELTER, ABS_SHELTER, MS_WORKTRIPS, MS_READING, MS_RACES,
    KU_5K, ABS_5K, KU_JOB, KU_STEPS, KU_CATTOY, KU_TOMATOES, KU_CLASS,
    TR_DENTIST, ABS_DENTIST, TR_WORKSHOP, TR_LIBRARY, TR_CAMPING, TR_FUNRUN, TR_OFFICE, TR_RECITAL,
)  # fmt: skip

# File orders of the history, cycled over the records that have no special layout.
ORDERS: tuple[str, ...] = ("shuffled", "by_day", "sorted")


# ---------------------------------------------------------------------------
# Building records.


@dataclass
class _Timeline:
    moments: list[datetime]  # chronological
    evidence_slots: list[int]  # indices into moments, ascending
    question_date: datetime
    same_day_pair: int | None = None  # k: moments k and k+1 share a day


def _random_time(rng: random.Random, day: date, first_hour: int = 0, last_hour: int = 23) -> datetime:
    return datetime(day.year, day.month, day.day, rng.randint(first_hour, last_hour), rng.randint(0, 59))


def _draw_timeline(rng: random.Random, spec: _Spec, order: str) -> _Timeline:
    count = rng.randint(6, 8)
    start = date(2023, 1, 2) + timedelta(days=rng.randint(0, 240))
    if spec.layout == "same_day":
        minutes = sorted(rng.sample(range(6 * 60, 24 * 60), count))
        moments = [datetime(start.year, start.month, start.day) + timedelta(minutes=m) for m in minutes]
    else:
        moments = []
        day = start
        for _ in range(count):
            moments.append(_random_time(rng, day))
            day += timedelta(days=rng.randint(1, 8))
    pair = None
    if order == "by_day":
        # Two consecutive sessions on one day; the file lists them latest first.
        pair = rng.randrange(count - 1)
        first_day = moments[pair].date()
        moments[pair] = _random_time(rng, first_day, 6, 14)
        moments[pair + 1] = _random_time(rng, first_day, 15, 23)
    candidates = [i for i in range(count) if pair is None or i not in (pair, pair + 1)]
    slots = sorted(rng.sample(candidates, spec.sessions))
    last = moments[-1]
    if spec.layout == "early_question":
        # Asked on the day of the last session, but earlier in the day (as happens in the real data).
        last = _random_time(rng, last.date(), 14, 22)
        moments[-1] = last
        question_date = _random_time(rng, last.date(), 7, last.hour - 1)
    else:
        question_date = _random_time(rng, last.date() + timedelta(days=rng.randint(1, 20)))
    return _Timeline(moments, slots, question_date, pair)


def _filler_session(rng: random.Random, topic: tuple[tuple[str, str], ...], pairs: int) -> list[_Pair]:
    return [_Pair(user, assistant, None) for user, assistant in rng.sample(topic, min(pairs, len(topic)))]


def _turns(pairs: list[_Pair]) -> list[dict[str, Any]]:
    turns: list[dict[str, Any]] = []
    for pair in pairs:
        turns.append({"role": "user", "content": pair.user, "has_answer": pair.evidence == "user"})
        turns.append({"role": "assistant", "content": pair.assistant, "has_answer": pair.evidence == "assistant"})
    return turns


def _hex(rng: random.Random) -> str:
    return f"{rng.getrandbits(32):08x}"


def _build_record(rng: random.Random, spec: _Spec, question_id: str, order: str) -> dict[str, Any]:
    for _ in range(200):
        timeline = _draw_timeline(rng, spec, order)
        context = _Context(tuple(timeline.moments[i] for i in timeline.evidence_slots), timeline.question_date)
        try:
            answer, planted = spec.make(context)
        except _Retry:
            continue
        break
    else:  # pragma: no cover - the rules above always find dates quickly
        raise RuntimeError(f"no usable dates for {spec.key}")
    assert len(planted) == spec.sessions, spec.key

    count = len(timeline.moments)
    topics = rng.sample(FILLER_TOPICS, count)
    contents: list[list[_Pair]] = []
    ids: list[str] = []
    used: set[str] = set()
    evidence_number = 0
    for index in range(count):
        if index in timeline.evidence_slots:
            filler = _filler_session(rng, topics[index], rng.randint(1, 2))
            exchange = planted[evidence_number]
            position = rng.randint(0, len(filler))
            contents.append(filler[:position] + exchange + filler[position:])
            evidence_number += 1
            session_id = f"answer_{_hex(rng)}_{evidence_number}"
        else:
            contents.append(_filler_session(rng, topics[index], rng.randint(2, 4)))
            session_id = f"{rng.choice(('chitchat', 'howto'))}_{_hex(rng)}"
        while session_id in used:  # pragma: no cover - 32 random bits
            session_id += "x"
        used.add(session_id)
        ids.append(session_id)

    positions = list(range(count))
    if order == "shuffled":
        while positions == sorted(positions):
            rng.shuffle(positions)
    elif order == "by_day":
        positions.sort(key=lambda i: (timeline.moments[i].date(), -timeline.moments[i].hour, -timeline.moments[i].minute))

    return {
        "question_id": question_id,
        "question_type": spec.question_type,
        "question": spec.question,
        "question_date": format_lme_date(timeline.question_date),
        "answer": answer,
        "answer_session_ids": [ids[i] for i in timeline.evidence_slots],
        "haystack_dates": [format_lme_date(timeline.moments[i]) for i in positions],
        "haystack_session_ids": [ids[i] for i in positions],
        "haystack_sessions": [_turns(contents[i]) for i in positions],
    }


def generate_sample(seed: int = 0) -> list[dict]:
    """The synthetic sample records, in the LongMemEval file format; the same seed gives the same records."""
    rng = random.Random(seed)
    base_ids: dict[str, str] = {}
    records = []
    plain = 0
    for spec in SPECS:
        if spec.abstention_of is not None:
            question_id = base_ids[spec.abstention_of] + "_abs"
        else:
            question_id = _hex(rng)
            while question_id in base_ids.values():  # pragma: no cover - 32 random bits
                question_id = _hex(rng)
            base_ids[spec.key] = question_id
        if spec.layout:
            order = "shuffled"
        else:
            order = ORDERS[plain % len(ORDERS)]
            plain += 1
        records.append(_build_record(rng, spec, question_id, order))
    return records


def render_sample(seed: int = 0) -> str:
    """The sample as the exact text of the committed file."""
    return json.dumps(generate_sample(seed), indent=1, ensure_ascii=False) + "\n"


def write_sample(path: Path = SAMPLE_PATH, seed: int = 0) -> Path:
    """Write the sample (UTF-8, `\\n` line ends) and return its path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(render_sample(seed).encode("utf-8"))
    return path


if __name__ == "__main__":
    print(write_sample())
