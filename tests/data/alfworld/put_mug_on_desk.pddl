; A pick-and-place task written for agentr1-gym's tests in ALFWorld's PDDL problem format (ALFRED domain):
; object ids mangled as ALFWorld's generator writes them, which its demangler turns into "mug 1", "desk 1".
(define (problem agentr1_put_mug_on_desk)
    (:domain alfred)
    (:objects
        agent1 - agent
        MugType - otype
        BookType - otype
        DeskType - rtype
        ShelfType - rtype
        Mug_bar__plus_00_dot_50_bar__plus_00_dot_90_bar__minus_01_dot_00 - object
        Book_bar__minus_00_dot_25_bar__plus_00_dot_80_bar__plus_01_dot_10 - object
        Desk_bar__plus_01_dot_00_bar__plus_00_dot_00_bar__plus_00_dot_50 - receptacle
        Shelf_bar__minus_01_dot_00_bar__plus_01_dot_20_bar__minus_01_dot_00 - receptacle
        loc_bar_0_bar_0_bar_0_bar_0 - location
        loc_bar_4_bar_2_bar_1_bar_90 - location
        loc_bar__minus_4_bar__minus_4_bar_2_bar_270 - location
    )
    (:init
        (receptacleType Desk_bar__plus_01_dot_00_bar__plus_00_dot_00_bar__plus_00_dot_50 DeskType)
        (receptacleType Shelf_bar__minus_01_dot_00_bar__plus_01_dot_20_bar__minus_01_dot_00 ShelfType)
        (objectType Mug_bar__plus_00_dot_50_bar__plus_00_dot_90_bar__minus_01_dot_00 MugType)
        (objectType Book_bar__minus_00_dot_25_bar__plus_00_dot_80_bar__plus_01_dot_10 BookType)
        (pickupable Mug_bar__plus_00_dot_50_bar__plus_00_dot_90_bar__minus_01_dot_00)
        (pickupable Book_bar__minus_00_dot_25_bar__plus_00_dot_80_bar__plus_01_dot_10)
        (canContain DeskType MugType)
        (canContain ShelfType MugType)
        (canContain DeskType BookType)
        (canContain ShelfType BookType)
        (atLocation agent1 loc_bar_0_bar_0_bar_0_bar_0)
        (inReceptacle Mug_bar__plus_00_dot_50_bar__plus_00_dot_90_bar__minus_01_dot_00 Shelf_bar__minus_01_dot_00_bar__plus_01_dot_20_bar__minus_01_dot_00)
        (inReceptacle Book_bar__minus_00_dot_25_bar__plus_00_dot_80_bar__plus_01_dot_10 Desk_bar__plus_01_dot_00_bar__plus_00_dot_00_bar__plus_00_dot_50)
        (receptacleAtLocation Desk_bar__plus_01_dot_00_bar__plus_00_dot_00_bar__plus_00_dot_50 loc_bar_4_bar_2_bar_1_bar_90)
        (receptacleAtLocation Shelf_bar__minus_01_dot_00_bar__plus_01_dot_20_bar__minus_01_dot_00 loc_bar__minus_4_bar__minus_4_bar_2_bar_270)
        (objectAtLocation Mug_bar__plus_00_dot_50_bar__plus_00_dot_90_bar__minus_01_dot_00 loc_bar__minus_4_bar__minus_4_bar_2_bar_270)
        (objectAtLocation Book_bar__minus_00_dot_25_bar__plus_00_dot_80_bar__plus_01_dot_10 loc_bar_4_bar_2_bar_1_bar_90)
    )
    (:goal
        (exists (?o - object ?r - receptacle)
            (and (objectType ?o MugType) (receptacleType ?r DeskType) (inReceptacle ?o ?r)))
    )
)
