"""A booking world from docs/tutorials/your_own_task.md: `agentr1 train --env booking_world:MyOrg/Booking-v0`."""

from agentr1_gym import register_task

HOTELS = {
    "Lima": {"Miraflores Inn": (80, 4.1), "Plaza Lima": (140, 4.7), "Casa Sol": (55, 3.6)},
    "Oslo": {"Fjord Hotel": (190, 4.5), "Nordic Rooms": (120, 3.9), "Harbour Stay": (150, 4.4)},
    "Quito": {"Andes Lodge": (70, 4.2), "Old Town B&B": (45, 3.8), "Volcano View": (95, 4.6)},
}


class Booking:
    """Find a hotel, book it, confirm."""

    def __init__(self, task: dict) -> None:
        self.booked, self.done = None, False

    def search(self, city: str) -> str:
        """The hotels of a city: name, price per night, rating.

        Args:
            city: a city, e.g. "Lima"
        """
        hotels = HOTELS.get(city, {})
        return (
            "; ".join(f"{h}: ${p}/night, {r} stars" for h, (p, r) in hotels.items()) or f"no hotels in {city}"
        )

    def book(self, hotel: str, nights: int) -> str:
        """Book a hotel (replaces an earlier booking).

        Args:
            hotel: the hotel's name, as search shows it
            nights: how many nights, 1 to 14
        """
        price = next((p for hotels in HOTELS.values() for h, (p, _) in hotels.items() if h == hotel), None)
        if price is None or not 1 <= nights <= 14:
            raise ValueError(f"cannot book {nights} nights at {hotel!r}")
        self.booked = (hotel, nights)
        return f"booked {hotel} for {nights} nights: ${price * nights}"

    def confirm(self) -> str:
        """Confirm the booking: ends the episode."""
        self.done = True
        return f"confirmed: {self.booked}"

    def state_key(self) -> tuple:
        return (self.booked,)


def best(task: dict) -> str:
    ok = [(p, h) for h, (p, r) in HOTELS[task["city"]].items() if r >= task["rating"]]
    return min(ok)[1]


def booked_the_best(world: Booking, task: dict) -> float:
    return float(world.booked == (best(task), task["nights"]))


TRIPS = [{"city": c, "rating": r, "nights": n} for c in HOTELS for r, n in ((4.0, 2), (4.4, 3))]
register_task(
    "MyOrg/Booking-v0",
    TRIPS,
    world=Booking,
    reward=booked_the_best,
    max_turns=6,
    prompt="Book the cheapest hotel in {city} rated at least {rating} for {nights} nights, then confirm.",
    process_rewards={"searched": lambda arguments, task: arguments.get("city") == task["city"]},
    oracle=lambda env: [
        ("search", {"city": env.task["city"]}),
        ("book", {"hotel": best(env.task), "nights": env.task["nights"]}),
        ("confirm",),
    ],
)
