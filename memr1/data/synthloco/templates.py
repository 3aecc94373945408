"""The sentence templates of synthloco: what speakers say, and the third-person facts behind it.

Each fact kind has several first-person paraphrases (``TURNS``) so that the surface text varies,
and exactly one third-person sentence (``OBSERVATIONS``) that goes into the session's
``observation`` field, the free "extracted fact" a pipeline can feed to the memory manager. A
single canonical sentence per kind keeps the extraction step noise-free; the variety lives in the
turns. Relative time stays relative in both ("yesterday"), as in LoCoMo's own observations; the
gold memory (gold.py) carries the resolved absolute date.

Placeholders: {name} the speaker, {other} the listener, {value} the item, {Value} capitalised,
{a_value} with its article, {old}/{a_old} the replaced value, {species}/{a_species}/{species_pl}
the pet species, {when}/{When} the relative time expression.
"""

from __future__ import annotations

# Keys are (fact key, action, dated). Pets are always dated; city and job have undated "first"
# facts ("I live in Boston") and dated ones ("I moved to Boston last year").
TURNS: dict[tuple[str, str, bool], tuple[str, ...]] = {
    ("pets", "first", True): (
        "Guess what? I adopted {a_species} named {value} {when}!",
        "{When} I brought home {a_species}. I named it {value}.",
        "I finally got a pet {when}: {a_species} named {value}.",
    ),
    ("pets", "another", True): (
        "We have a new family member! I adopted another {species} named {value} {when}.",
        "{When} I brought home another {species}, and I named it {value}.",
        "My home got busier {when}: I adopted another {species}, {value}.",
    ),
    ("pets", "repeat", False): (
        "My {species} {value} has been keeping me busy lately.",
        "I took {value} to the vet for a checkup, my {species} is doing great.",
        "{Value} the {species} says hi, by the way!",
    ),
    ("hobbies", "first", False): (
        "I recently took up {value} and I love it.",
        "I've gotten really into {value} lately, it's my new hobby.",
        "Have I told you? I started {value}, it has become my hobby.",
    ),
    ("hobbies", "another", False): (
        "I picked up another hobby: {value}.",
        "On top of everything else, I've started {value} as a hobby too.",
        "I have a new hobby as well, {value}!",
    ),
    ("hobbies", "repeat", False): (
        "I spent the whole weekend {value}, it was so relaxing.",
        "{Value} is still my favorite way to relax.",
        "I can't get enough of {value} these days.",
    ),
    ("city", "first", False): (
        "I live in {value} and I really like it there.",
        "Life in {value} has been treating me well.",
        "You know, I've lived in {value} for years now.",
    ),
    ("city", "first", True): (
        "I moved to {value} {when}, and I'm still settling in.",
        "{When} I moved to {value}, best decision ever.",
    ),
    ("city", "change", True): (
        "Big change: I moved from {old} to {value} {when}!",
        "I finally did it, I moved to {value} {when}. Goodbye {old}!",
        "{When} I packed everything up and moved from {old} to {value}.",
    ),
    ("city", "repeat", False): (
        "The weather in {value} has been lovely this week.",
        "There's a great new cafe near my place in {value}.",
    ),
    ("job", "first", False): (
        "I work as {a_value}, and I enjoy it most days.",
        "Work as {a_value} keeps me really busy.",
        "Being {a_value} is my job, and I'm proud of it.",
    ),
    ("job", "first", True): (
        "I started working as {a_value} {when}.",
        "{When} I got a job as {a_value}, and I'm loving it.",
    ),
    ("job", "change", True): (
        "I have news: I quit my job as {a_old} and started as {a_value} {when}!",
        "{When} I started a new job as {a_value}. No more working as {a_old}!",
        "I left my job as {a_old} and became {a_value} {when}.",
    ),
    ("job", "repeat", False): (
        "Being {a_value} is tiring some days, but I love it.",
        "Long week at work, being {a_value} is no joke.",
    ),
    ("food", "first", False): (
        "My favorite food is {value}, I could eat it every day.",
        "Honestly, nothing beats {value}. It's my favorite food.",
    ),
    ("food", "repeat", False): (
        "I had {value} for dinner again, still my favorite.",
        "We went out for {value}, it was so good.",
    ),
    ("trip", "first", False): (
        "I'm planning a trip to {value}, I can't wait!",
        "I've started planning a trip to {value}.",
    ),
    ("trip", "change", False): (
        "Change of plans: I'm going to {value} instead of {old}.",
        "I changed my trip plans, it will be {value} instead of {old}.",
    ),
    ("trip", "cancel", False): (
        "Sadly I had to cancel my trip to {value}.",
        "The trip to {value} is off, I cancelled it.",
    ),
    ("trip", "repeat", False): (
        "I've been reading about {value} for my trip, so much to see!",
        "I'm still counting the days until my trip to {value}.",
    ),
    ("event", "first", False): (
        "I'm going to {a_value} soon, I'm so excited!",
        "I just signed up for {a_value}, it should be fun.",
    ),
    ("event", "change", False): (
        "I'm skipping the {old} and going to {a_value} instead.",
        "Plans changed, I'll go to {a_value} instead of the {old}.",
    ),
    ("event", "cancel", False): (
        "I'm not going to the {value} anymore, something came up.",
        "I had to back out of the {value}, sadly.",
    ),
    ("event", "repeat", False): (
        "I'm still looking forward to the {value}.",
        "I can't stop thinking about the {value}!",
    ),
}

OBSERVATIONS: dict[tuple[str, str, bool], str] = {
    ("pets", "first", True): "{name} adopted {a_species} named {value} {when}.",
    ("pets", "another", True): "{name} adopted another {species} named {value} {when}.",
    ("pets", "repeat", False): "{name} has {a_species} named {value}.",
    ("hobbies", "first", False): "{name} took up {value} as a hobby.",
    ("hobbies", "another", False): "{name} took up {value} as another hobby.",
    ("hobbies", "repeat", False): "{name} enjoys {value}.",
    ("city", "first", False): "{name} lives in {value}.",
    ("city", "first", True): "{name} moved to {value} {when}.",
    ("city", "change", True): "{name} moved from {old} to {value} {when}.",
    ("city", "repeat", False): "{name} lives in {value}.",
    ("job", "first", False): "{name} works as {a_value}.",
    ("job", "first", True): "{name} started working as {a_value} {when}.",
    (
        "job",
        "change",
        True,
    ): "{name} left the job as {a_old} and started working as {a_value} {when}.",
    ("job", "repeat", False): "{name} works as {a_value}.",
    ("food", "first", False): "{name}'s favorite food is {value}.",
    ("food", "repeat", False): "{name}'s favorite food is {value}.",
    ("trip", "first", False): "{name} is planning a trip to {value}.",
    ("trip", "change", False): "{name} is now planning a trip to {value} instead of {old}.",
    ("trip", "cancel", False): "{name} cancelled the trip to {value}.",
    ("trip", "repeat", False): "{name} is planning a trip to {value}.",
    ("event", "first", False): "{name} plans to go to {a_value}.",
    ("event", "change", False): "{name} now plans to go to {a_value} instead of the {old}.",
    ("event", "cancel", False): "{name} cancelled going to the {value}.",
    ("event", "repeat", False): "{name} plans to go to {a_value}.",
}

# What the listener says right after a fact: small talk that states nothing about the listener.
REACTIONS: dict[str, tuple[str, ...]] = {
    "pets": ("Aww, {value} sounds adorable!", "I love {species_pl}! Send me a photo of {value}."),
    "hobbies": ("{Value} sounds like so much fun!", "That's a great hobby to have."),
    "city": ("{value} is a great place!", "Oh nice, I've heard good things about {value}."),
    "job": ("Good for you, that sounds rewarding.", "That's great, work matters so much."),
    "food": ("Yum, {value} sounds delicious.", "Now you're making me hungry!"),
    "trip": ("{value} sounds amazing, enjoy the planning!", "What a great place to visit."),
    "event": ("That sounds like so much fun!", "I hope you have a great time at the {value}!"),
    "cancel": ("Oh no, that's too bad. Maybe next time.", "Sorry to hear that, plans change."),
}

GREETINGS = (
    "Hey {other}! Good to see you again. How have you been?",
    "Hi {other}! It's been a while. What's new?",
    "Hey {other}, long time no talk! How are things?",
)
GREETING_REPLIES = (
    "Hi {other}! I've been well, thanks for asking.",
    "Hey {other}! Pretty good, it's been a busy couple of weeks.",
    "Good to hear from you, {other}! All good here.",
)
# Asked right after the greeting, so that a session opens with catch-up chat as in LoCoMo.
CATCH_UP = (
    "So, what's new since we last talked?",
    "Anything exciting happen since our last chat?",
    "What have you been up to lately?",
)
CATCH_UP_REPLIES = (
    "Not much, just the usual. How about you?",
    "Oh, nothing special on my side. And you?",
    "Same old, same old. What about you?",
)
FILLERS = (
    "It's always nice to catch up with you.",
    "Time really flies, doesn't it?",
    "Ha, I know exactly what you mean.",
    "Tell me more, I want to hear everything.",
    "That's so true.",
    "The weekend went by way too fast.",
    "Life has been pretty hectic lately.",
    "I know, right?",
    "Anyway, enough about that.",
    "It's been a long week, honestly.",
)
CLOSINGS = (
    "Anyway, I should get going. Talk soon, {other}!",
    "This was fun, let's catch up again soon.",
    "I have to run now, but it was great chatting.",
)
CLOSING_REPLIES = (
    "Take care, {other}! Bye!",
    "Sounds good, bye for now!",
    "Same here, talk to you later!",
)
