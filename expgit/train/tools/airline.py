"""The example airline environment (after tau2-bench's airline domain, much smaller).

Its database fixture (``example_repo/airline/db.json``) is a JSON object with
``users`` (by user id: name, membership, payment_methods by id, reservations),
``reservations`` (by id: user_id, origin, destination, cabin, flights, passengers,
total_baggages, nonfree_baggages, status, payment_history) and ``flights`` (by flight
number: origin, destination, and by date its status, seats and prices by cabin).
``certificates`` and ``transfers`` are lists the tools append to. The tools do what they
are asked (as in tau2): the policy is the agent's to follow, and the rubric's to check.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from expgit.errors import InvalidInputError
from expgit.train.tools.environment import State, StateFactory, Tool, ToolError, read_json

Cabin = Literal["basic_economy", "economy", "business"]
_TABLES = ("users", "reservations", "flights")


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


class UserArgs(_Args):
    user_id: str = Field(description="The user's id, such as 'mia_li_3668'.")


class ReservationArgs(_Args):
    reservation_id: str = Field(description="The reservation id, such as 'ZFA04Y'.")


class SearchArgs(_Args):
    origin: str = Field(description="IATA code of the origin airport, such as 'JFK'.")
    destination: str = Field(description="IATA code of the destination airport.")
    date: str = Field(description="The date of the flight, YYYY-MM-DD.")


class BaggageArgs(ReservationArgs):
    total_baggages: int = Field(ge=0, description="The new number of checked bags.")
    nonfree_baggages: int = Field(ge=0, description="How many of them are paid for.")
    payment_id: str = Field(description="The payment method id, such as 'credit_card_1'.")


class FlightRef(_Args):
    flight_number: str
    date: str


class UpdateFlightsArgs(ReservationArgs):
    cabin: Cabin
    flights: list[FlightRef] = Field(min_length=1)
    payment_id: str


class CertificateArgs(UserArgs):
    amount: float = Field(gt=0, description="The certificate's amount in USD.")


class TransferArgs(_Args):
    summary: str = Field(description="A summary of the user's issue for the human agent.")


def _record(state: State, table: str, key: str) -> dict[str, Any]:
    record = state[table].get(key)
    if not isinstance(record, dict):
        raise ToolError(f"{table[:-1]} {key!r} not found")
    return record


def _payment(state: State, reservation: dict[str, Any], payment_id: str) -> None:
    user = _record(state, "users", reservation["user_id"])
    if payment_id not in user.get("payment_methods", {}):
        raise ToolError(f"payment method {payment_id!r} not found for this user")


def get_user_details(state: State, args: UserArgs) -> Any:
    return _record(state, "users", args.user_id)


def get_reservation_details(state: State, args: ReservationArgs) -> Any:
    return _record(state, "reservations", args.reservation_id)


def search_direct_flight(state: State, args: SearchArgs) -> Any:
    found = []
    for number, flight in sorted(state["flights"].items()):
        day = flight.get("dates", {}).get(args.date)
        if (flight.get("origin"), flight.get("destination")) == (args.origin, args.destination) \
                and day is not None and day.get("status") == "available":
            found.append({"flight_number": number, "date": args.date, **day})
    return found


def cancel_reservation(state: State, args: ReservationArgs) -> Any:
    reservation = _record(state, "reservations", args.reservation_id)
    if reservation.get("status") == "cancelled":
        raise ToolError(f"reservation {args.reservation_id} is already cancelled")
    reservation["status"] = "cancelled"
    refunds = [{**p, "amount": -p["amount"]} for p in reservation.get("payment_history", [])]
    reservation.setdefault("payment_history", []).extend(refunds)
    return reservation


def update_reservation_baggages(state: State, args: BaggageArgs) -> Any:
    reservation = _record(state, "reservations", args.reservation_id)
    if args.nonfree_baggages > args.total_baggages:
        raise ToolError("nonfree_baggages cannot exceed total_baggages")
    _payment(state, reservation, args.payment_id)
    added = max(0, args.nonfree_baggages - reservation.get("nonfree_baggages", 0))
    reservation["total_baggages"] = args.total_baggages
    reservation["nonfree_baggages"] = args.nonfree_baggages
    if added:
        reservation.setdefault("payment_history", []).append(
            {"payment_id": args.payment_id, "amount": 50 * added})
    return reservation


def update_reservation_flights(state: State, args: UpdateFlightsArgs) -> Any:
    reservation = _record(state, "reservations", args.reservation_id)
    _payment(state, reservation, args.payment_id)
    flights = []
    for ref in args.flights:
        day = _record(state, "flights", ref.flight_number).get("dates", {}).get(ref.date)
        if day is None or day.get("status") != "available":
            raise ToolError(f"flight {ref.flight_number} is not available on {ref.date}")
        flights.append({"flight_number": ref.flight_number, "date": ref.date,
                        "price": day["prices"][args.cabin]})
    reservation["cabin"] = args.cabin
    reservation["flights"] = flights
    return reservation


def send_certificate(state: State, args: CertificateArgs) -> Any:
    user = _record(state, "users", args.user_id)
    certificate = {"user_id": args.user_id, "amount": args.amount}
    state.setdefault("certificates", []).append(certificate)
    user.setdefault("payment_methods", {})[f"certificate_{len(state['certificates'])}"] = {
        "source": "certificate", "amount": args.amount}
    return f"Certificate of {args.amount:g} USD sent to {args.user_id}."


def transfer_to_human_agents(state: State, args: TransferArgs) -> Any:
    state.setdefault("transfers", []).append(args.summary)
    return "Transfer successful. A human agent will take over."


TOOLS = (
    Tool("get_user_details", "Get a user's profile, payment methods and reservations.",
         UserArgs, get_user_details),
    Tool("get_reservation_details", "Get the details of a reservation.",
         ReservationArgs, get_reservation_details),
    Tool("search_direct_flight", "Search direct flights between two airports on a date.",
         SearchArgs, search_direct_flight),
    Tool("cancel_reservation", "Cancel a whole reservation and refund its payments.",
         ReservationArgs, cancel_reservation),
    Tool("update_reservation_baggages", "Set the checked bags of a reservation; paid "
         "bags cost 50 USD each, charged to the payment method.",
         BaggageArgs, update_reservation_baggages),
    Tool("update_reservation_flights", "Change the cabin and flights of a reservation.",
         UpdateFlightsArgs, update_reservation_flights),
    Tool("send_certificate", "Send a compensation certificate to a user.",
         CertificateArgs, send_certificate),
    Tool("transfer_to_human_agents", "Transfer the user to a human agent, with a "
         "summary of the issue.", TransferArgs, transfer_to_human_agents),
)


class AirlineKind:
    name = "airline"

    def open(self, database: Path) -> StateFactory:
        data = read_json(database)
        if not isinstance(data, dict):
            raise InvalidInputError(f"{database}: the airline database must be a JSON object")
        for table in _TABLES:
            if not isinstance(data.get(table), dict):
                raise InvalidInputError(f"{database}: the airline database needs a "
                                        f"{table!r} object (records by id)")
        return StateFactory(TOOLS, data)


AIRLINE = AirlineKind()
